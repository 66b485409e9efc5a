#include "core/transport/shm/window_steps.h"

#include <string>

namespace hora {
namespace shm {

WindowSteps::WindowSteps(ShmLinks& links)
    : links_(links), p_(links.peers()), s_(p_.segment), me_(p_.worldRank), n_(p_.worldSize) {
  for (int r = 0; r < n_; ++r) {
    if (r != me_) others_.push_back(r);
  }
}

// The part counter runs over the whole job, not one collective, so consecutive window collectives
// keep alternating halves and step numbers keep growing.
uint32_t WindowSteps::nextPart() { return ++p_.windowPart; }

uint8_t* WindowSteps::half(int r, uint32_t part) const {
  // Consecutive parts use different halves, so a rank may stage part k + 1 while peers still read
  // part k.
  return s_.window(r, static_cast<int>(part & 1));
}

bool WindowSteps::reached(int r, uint32_t step) const {
  // Signed difference, so the comparison survives the 32-bit step counter wrapping; acquire pairs
  // with the release in publish(), making the peer's window writes visible.
  return static_cast<int32_t>(s_.rank(r).window.step.load(std::memory_order_acquire) - step) >= 0;
}

void WindowSteps::publish(uint32_t step) {
  s_.rank(me_).window.step.store(step, std::memory_order_release);
  for (int r : others_) ring(p_.doorbell(r));
}

void WindowSteps::publishAndWait(uint32_t step, const char* what) {
  publish(step);
  auto ready = [&] {
    for (int r : others_) {
      if (!reached(r, step)) return false;
    }
    return true;
  };
  auto missing = [&] {
    std::string out;
    for (int r : others_) {
      if (!reached(r, step)) out += (out.empty() ? "" : ", ") + std::to_string(p_.jobRank(r));
    }
    return "waiting for rank " + out + " to " + what;
  };
  // A peer that reached the step and then left has given this wait what it needed, so its leaving
  // does not fail it.
  links_.waitFor(ready, others_, missing, [&](int r) { return !reached(r, step); });
}

}  // namespace shm
}  // namespace hora
