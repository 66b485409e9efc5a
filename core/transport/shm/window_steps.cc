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

uint32_t WindowSteps::nextPart() { return ++p_.windowPart; }

uint8_t* WindowSteps::half(int r, uint32_t part) const {
  return s_.window(r, static_cast<int>(part & 1));
}

bool WindowSteps::reached(int r, uint32_t step) const {
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
  links_.waitFor(ready, others_, missing, [&](int r) { return !reached(r, step); });
}

}  // namespace shm
}  // namespace hora
