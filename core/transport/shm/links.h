#pragma once
// ShmLinks: the shared-memory implementation of collectives::Links (core/collectives/links.h).
// Every ordered pair of ranks has a byte ring in the job's Segment; trySend copies into the ring
// towards the peer, tryRecv copies out of the ring from it, so every algorithm of
// core/collectives/ runs as chunked staging through a bounded buffer, whatever the message size.
//
// One ShmPeers (the mapping, the wait policy, the peers' liveness) is shared by the world
// communicator and every subset view; a ShmLinks maps its group's ranks onto world ranks. Waits
// follow wait.h and fail with IoError when a peer they wait on has left (its gone flag, or its
// process exited: pidfd) and with TimeoutError after the op timeout. markFailed() marks this rank
// gone and unmaps the segment: peers waiting on it fail at once. Single-threaded (a control
// channel's wakeup() from another thread only rings a doorbell of a segment that stays mapped
// while the channel lives).
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/collectives/links.h"
#include "core/collectives/scratch_buffers.h"
#include "core/transport/shm/segment.h"
#include "core/transport/shm/wait.h"

namespace hora {
namespace shm {

struct ShmPeers {
  ShmPeers(Segment segment, int worldRank, const WaitPolicy& policy);
  ~ShmPeers();

  int worldRank = 0;
  int worldSize = 1;
  Segment segment;
  WaitPolicy policy;
  std::vector<int> pidfds;  // by world rank; -1 for this rank and for ranks in this process
  std::string failure;      // why the segment became unusable ("" while healthy)
  uint32_t lineSeq = 0;     // small-payload allreduces of the whole job run so far
  uint32_t windowPart = 0;  // parts of window allreduces of the whole job run so far
  // The job's rank of each rank of the segment, for messages; empty when they are the same (a
  // host's own segment of the hierarchical path numbers its ranks by their index on the host).
  std::vector<int> jobRanks;
  // A ShmControlChannel uses the segment: markFailed() leaves it mapped, since the channel still
  // carries this rank's last messages (its failure's reason); it goes with the last owner.
  bool controlInUse = false;
  // An agreement board on the segment is in use (agreement_board.h): the control channel's waits
  // also end when another rank publishes a round after boardSeen was taken (board.looked()).
  bool boardInUse = false;
  // Atomic: a thread waiting on a handle may step the agreement (so write it) while the
  // background thread waits in the control channel's poll (core/runtime/background_loop.h).
  std::atomic<uint64_t> boardSeen{0};
  collectives::ScratchBuffers scratch;

  // The rank messages name for segment rank r.
  int jobRank(int r) const { return jobRanks.empty() ? r : jobRanks[r]; }
  // "" while world rank `peer` is attached, else why it is not (left, failed, exited).
  std::string peerGone(int peer) const;
  // "" while the process of world rank `peer` runs, else that it exited (its pidfd).
  std::string processExited(int peer) const;
  // "" or "; rank 0 exited too": the other ranks gone besides `peer`. A failing rank leaves the
  // group in turn, so the peer a rank waits on may be gone only because another rank died first.
  std::string othersGone(int peer) const;
  Doorbell& doorbell(int worldRank) const { return segment.rank(worldRank).doorbell; }
  // The sum of the agreement rounds the other ranks published: it grows with each one.
  uint64_t othersRounds() const;
  // Whether another rank published an agreement round since boardSeen was taken.
  bool boardMoved() const {
    return boardInUse && othersRounds() != boardSeen.load(std::memory_order_relaxed);
  }
  void markFailed(const std::string& why);
};

class ShmLinks : public collectives::Links {
 public:
  ShmLinks(std::shared_ptr<ShmPeers> peers, std::vector<int> worldRanks, int rank);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(worldRanks_.size()); }
  size_t trySend(int peer, const void* data, size_t bytes) override;
  size_t tryRecv(int peer, void* data, size_t bytes) override;
  void waitAny(const Want* wants, size_t count) override;
  uint8_t* scratch(int slot, size_t bytes) override;

  void setOp(const char* op) { op_ = op; }
  const char* op() const { return op_; }
  int worldRank(int peer) const { return worldRanks_[peer]; }
  ShmPeers& peers() { return *peers_; }
  // Waits until ready(), failing when one of the listed group peers leaves while it still holds
  // the wait up (stillNeeded(peer), when given: a peer that left after doing its part is fine);
  // what() says what was awaited, for the error message.
  void waitFor(const std::function<bool()>& ready, const std::vector<int>& peers,
               const std::function<std::string()>& what,
               const std::function<bool(int peer)>& stillNeeded = nullptr);

 private:
  std::shared_ptr<ShmPeers> peers_;
  std::vector<int> worldRanks_;
  int rank_;
  const char* op_ = "collective";
  std::vector<int> waitPeers_;
};

}  // namespace shm
}  // namespace hora
