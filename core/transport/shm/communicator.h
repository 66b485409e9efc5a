#pragma once
// ShmCommunicator: the Communicator of the shared-memory transport, for ranks that all run on one
// host. Views made by subset() share the world's segment (ShmPeers) and differ only in the mapping
// of their ranks to world ranks.
//
// Collectives, argument checks and the failure rule come from LinksCommunicator over ShmLinks.
// A group spanning the whole job runs small allreduces (SharedPayload in the algorithm table)
// through the ranks' own lines and payload blocks instead: each rank publishes its payload and a
// sequence number, then reduces every rank's payload itself, in rank order, so floating sums are
// bit-identical to the rank-ordered algorithm. When the segment has windows, it runs larger
// allreduces in them (Window, window_allreduce.h), fused tensors included (allreducePieces), and
// large broadcasts (window_gather.h). A
// failure marks this rank gone and unmaps the segment: peers waiting on it fail at once, and later
// calls throw IoError. One thread at a time.
#include <memory>
#include <string>
#include <vector>

#include "core/collectives/algorithm_table.h"
#include "core/transport/links_communicator.h"
#include "core/transport/shm/links.h"

namespace hora {
namespace shm {

class ShmCommunicator : public LinksCommunicator {
 public:
  // worldRanks[i] is the world rank of member i; rank is this process's index in worldRanks.
  ShmCommunicator(std::shared_ptr<ShmPeers> peers, std::vector<int> worldRanks, int rank);

  std::string backendName() const override { return "shm"; }
  std::unique_ptr<Communicator> subset(const std::vector<int>& ranks) override;
  // A group spanning the whole job, on a segment with windows, reduces pieces there when the
  // algorithm table chooses Window.
  bool reducesPieces(size_t count, DataType dtype, ReduceOp op) const override;
  void allreducePieces(const std::vector<BufferPiece>& pieces, size_t count, DataType dtype,
                       ReduceOp op) override;
  // The segment's arena, read by the window allreduces (so only where they run).
  std::shared_ptr<SharedPool> sharedPool() const override;

 protected:
  collectives::Links& links() override { return links_; }
  int worldRank() const override { return peers_->worldRank; }
  std::string failure() const override { return peers_->failure; }
  void markFailed(const std::string& why) override { peers_->markFailed(why); }
  void setOp(const char* op) override { links_.setOp(op); }
  bool allreduceDirect(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  bool broadcastDirect(void* buf, size_t bytes, int root) override;
  bool everyPairLinked() const override { return true; }  // a ring per ordered pair, from start

 private:
  void allreduceSharedPayload(void* buf, size_t count, DataType dtype, ReduceOp op);
  bool rankOrder(DataType dtype, ReduceOp op) const;
  bool windows() const { return wholeJob_ && peers_->segment.windowBytes() > 0; }
  collectives::AllreduceAlgorithm algorithm(size_t count, DataType dtype, ReduceOp op) const;

  std::shared_ptr<ShmPeers> peers_;
  ShmLinks links_;
  bool wholeJob_;  // members are every world rank, in order: the payload lines are this group's
  std::vector<int> others_;  // group ranks other than this one
};

}  // namespace shm
}  // namespace hora
