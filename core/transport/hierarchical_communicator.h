#pragma once
// HierarchicalCommunicator: the global process set's communicator when a hierarchical collective
// is chosen: a job over several hosts with the same number of ranks on each, where every rank
// sets HORA_HIERARCHICAL_ALLREDUCE or _ALLGATHER, or leaves it to the engine (see
// makeGlobalCommunicator). The chosen ones (allreduce, allgatherv) run the
// algorithms of collectives/hierarchical.h over two subsets of the world (this host's ranks, and
// the ranks of the other hosts with the same local index); every other collective runs on the
// flat communicator it wraps. Same contract as Communicator;
// the three communicators share the world's connections and one thread uses them at a time.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/collectives/hierarchical.h"
#include "core/common/settings.h"
#include "core/transport/communicator.h"

namespace hora {

class HierarchicalCommunicator final : public Communicator {
 public:
  // Which collectives run hierarchically. gpuAllreduce: GPU tensors' allreduces too (only when
  // every rank asked for it: NCCL is aware of hosts on its own, and the hierarchical GPU path
  // crosses hosts through host memory).
  struct Choice {
    bool allreduce = false;
    bool allgather = false;
    bool gpuAllreduce = false;
  };
  HierarchicalCommunicator(std::unique_ptr<Communicator> flat, std::unique_ptr<Communicator> local,
                           std::unique_ptr<Communicator> cross, collectives::HostLayout layout,
                           Choice choice);

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  std::string backendName() const override { return flat_->backendName(); }
  Capabilities capabilities() const override { return flat_->capabilities(); }
  bool hierarchicalAllreduce() const override { return choice_.allreduce; }
  bool hierarchicalAllgather() const override { return choice_.allgather; }
  bool hierarchicalGpuAllreduce() const { return choice_.gpuAllreduce; }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) override;
  void broadcast(void* buf, size_t bytes, int root) override { flat_->broadcast(buf, bytes, root); }
  void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                 const std::vector<size_t>& recvBytes) override {
    flat_->alltoallv(in, sendBytes, out, recvBytes);
  }
  void reduceScatter(const void* in, void* out, const std::vector<size_t>& countsPerRank,
                     DataType dtype, ReduceOp op) override {
    flat_->reduceScatter(in, out, countsPerRank, dtype, op);
  }
  void barrier() override { flat_->barrier(); }
  void sendRecv(int sendTo, const void* sendBuf, size_t sendBytes, int recvFrom, void* recvBuf,
                size_t recvBytes) override {
    flat_->sendRecv(sendTo, sendBuf, sendBytes, recvFrom, recvBuf, recvBytes);
  }
  std::unique_ptr<Communicator> subset(const std::vector<int>& ranks) override {
    return flat_->subset(ranks);
  }

  // The pieces the GPU path's hierarchical allreduce uses (NCCL within the host, this cross
  // communicator across hosts): same thread, between collectives only.
  Communicator& cross() { return *cross_; }
  const collectives::HostLayout& layout() const { return layout_; }

 private:
  std::unique_ptr<Communicator> flat_, local_, cross_;
  collectives::HostLayout layout_;
  Choice choice_;
  std::vector<uint8_t> scratch_;
};

// comm as the hierarchical communicator whose GPU allreduces run hierarchically, else null.
inline HierarchicalCommunicator* gpuHierarchy(Communicator* comm) {
  auto* h = dynamic_cast<HierarchicalCommunicator*>(comm);
  return h != nullptr && h->hierarchicalGpuAllreduce() ? h : nullptr;
}

// What each rank asks for, from HORA_HIERARCHICAL_ALLREDUCE and _ALLGATHER.
struct HierarchyRequest {
  Preference allreduce = Preference::Auto;
  Preference allgather = Preference::Off;
};

// The global set's communicator over `all` (every world rank): hierarchical for each collective
// when the hosts allow it and the ranks ask for it: On on every rank, or Auto on some and On or
// Auto on the others with at least two ranks on each host (measured on hosts with 1 Gbit/s links,
// bench/multihost.py: 0.57-0.65x the flat time from 1 MiB to 64 MiB, never slower below,
// within 1.12x of the links' bound at 64 MiB); Off on any rank keeps it flat. Otherwise
// world.subset(all). Collective over the world: every rank reports its requests and place (an
// allgather of a few bytes) and all reach the same verdict; rank 0 logs it at Info, and why when
// a path that every rank asked for does not run.
// hostLocal, when given, may return a communicator of this rank's host over other means (shared
// memory); it is called by every rank of every host, with the host's index, this rank's index on
// it and the host's ranks (world ranks, by index), and returns null (with why) to keep the
// world's subset.
using HostLocalFactory = std::function<std::unique_ptr<Communicator>(
    int host, int index, const std::vector<int>& hostRanks, std::string* why)>;
std::unique_ptr<Communicator> makeGlobalCommunicator(Communicator& world,
                                                     const std::vector<int>& all,
                                                     const HierarchyRequest& requested,
                                                     const collectives::RankPlace& mine,
                                                     const HostLocalFactory& hostLocal = nullptr);

}  // namespace hora
