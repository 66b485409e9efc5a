#pragma once
// WindowSteps: the steps every window collective (window_allreduce.h, window_gather.h) takes
// together over the whole job's shared segment.
//
// Parts are counted over the job (ShmPeers::windowPart): part k uses half k & 1 of every rank's
// window. A rank publishes 2k - 1 once its half holds what it brings to part k, and 2k once it is
// done writing to any half for part k. Before it writes its half for part k it has seen every
// rank publish 2(k - 1) - 1, which each does only after it finished reading part k - 2 (the same
// half): so no rank is still reading what it overwrites, and no collective needs more waits
// for that.
#include <cstdint>
#include <vector>

#include "core/transport/shm/links.h"

namespace hora {
namespace shm {

class WindowSteps {
 public:
  // links: a group of every rank of the segment, in order.
  explicit WindowSteps(ShmLinks& links);

  // The next part's number (k above).
  uint32_t nextPart();
  // Half `part & 1` of rank r's window.
  uint8_t* half(int r, uint32_t part) const;
  size_t halfBytes() const { return s_.windowBytes() / 2; }
  // Publishes this rank's step.
  void publish(uint32_t step);
  // Publishes this rank's step, then waits until every other rank reached it. A rank that reached
  // it and then left (the job ending) does not fail the wait; `what` completes "waiting for rank
  // X to ..." in errors.
  void publishAndWait(uint32_t step, const char* what);

  int me() const { return me_; }
  int size() const { return n_; }
  const std::vector<int>& others() const { return others_; }
  ShmLinks& links() { return links_; }

 private:
  bool reached(int r, uint32_t step) const;

  ShmLinks& links_;
  ShmPeers& p_;
  const Segment& s_;
  int me_;
  int n_;
  std::vector<int> others_;
};

}  // namespace shm
}  // namespace hora
