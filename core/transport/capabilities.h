#pragma once
// Capabilities: what a Communicator runs natively, so callers can check a request against the
// backend that will carry it (and a later backend can take over only what it does well) instead
// of finding out through NotSupported in the middle of a collective.
//
// Contract: a communicator's capabilities are fixed for its lifetime and shared by its subsets.
// Ops with a reduction reduce element-wise; Average and Adasum are built by the engine on top of
// Sum and point-to-point transfers, so no backend lists them.
#include <bitset>
#include <cstdint>

#include "core/common/device.h"
#include "core/common/dtype.h"

namespace hora {

// The Communicator operations, one bit each in Capabilities::ops.
enum class CollectiveOp : uint8_t {
  Allreduce,
  Allgatherv,
  Broadcast,
  Alltoallv,
  ReduceScatter,
  Barrier,
  SendRecv,
};
constexpr int kNumCollectiveOps = 7;

struct Capabilities {
  bool hostMemory = true;   // accepts CPU buffers
  bool cudaMemory = false;  // accepts CUDA device buffers (and honours TensorView::readyEvent)
  bool subsets = true;      // subset() gives communicators over some of its ranks
  std::bitset<kNumCollectiveOps> ops;
  std::bitset<8> reduceOps;  // by ReduceOp value
  std::bitset<kNumDataTypes> dtypes;

  // Host memory, every operation, the element-wise reductions (Sum, Min, Max, Product), every
  // dtype, subsets: the whole Communicator contract on CPU buffers.
  static Capabilities cpuComplete();

  bool accepts(const Device& d) const { return d.isCpu() ? hostMemory : cudaMemory; }
  // Out-of-range values (a corrupt enum) answer false rather than throw.
  bool supports(CollectiveOp op) const { return has(ops, static_cast<size_t>(op)); }
  bool reduces(ReduceOp op) const { return has(reduceOps, static_cast<size_t>(op)); }
  bool carries(DataType t) const { return has(dtypes, static_cast<size_t>(t)); }

 private:
  template <size_t N>
  static bool has(const std::bitset<N>& bits, size_t i) {
    return i < N && bits[i];
  }
};

}  // namespace hora
