#pragma once
// Capabilities: what a Communicator runs natively, so callers can check a request against the
// backend that will carry it (and a later backend can take over only what it does well) instead
// of finding out through NotSupported in the middle of a collective.
//
// Contract: a communicator's capabilities are fixed for its lifetime and shared by its subsets.
// Ops with a reduction reduce element-wise; Average and Adasum are built by the engine on top of
// Sum and point-to-point transfers, so no backend lists them.
//
// A device backend (core/transport/device_backend.h) also states its limits on device tensors
// (the "device path" fields): the enqueue checks (core/coordinator/enqueue_checks.h) apply them
// to every request on a device, so what the backend cannot run fails in the caller's thread. Their
// defaults are no limit, which is what the CPU transports (never given device tensors) keep.
#include <bitset>
#include <cstdint>
#include <string>

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

  // The device path: on when offReason is empty (otherwise it says which step failed: no library,
  // no driver, no device), for device indices [0, deviceCount) (any index when negative).
  std::string offReason;
  int deviceCount = -1;
  std::string deviceRuntime = "CUDA";    // who counts the devices, for messages
  bool adasum = true;                    // Adasum of tensors it takes
  bool scaleFactors = true;              // prescale/postscale other than 1 in reductions...
  bool scaleFactorsHierarchical = true;  // ...and in an allreduce that runs hierarchically
  std::bitset<kNumDataTypes> reducibleDtypes = ~std::bitset<kNumDataTypes>();
  // For the message refusing a reduction: who reduces ("NCCL (NCCL 2.23.3)") and the dtypes it
  // does reduce ("float32, float16, int32, ...; bfloat16 needs NCCL 2.10 or later").
  std::string reducer;
  std::string reducibleHint;

  // Host memory, every operation, the element-wise reductions (Sum, Min, Max, Product), every
  // dtype, subsets: the whole Communicator contract on CPU buffers.
  static Capabilities cpuComplete();

  bool accepts(const Device& d) const { return d.isCpu() ? hostMemory : cudaMemory; }
  // Out-of-range values (a corrupt enum) answer false rather than throw.
  bool supports(CollectiveOp op) const { return has(ops, static_cast<size_t>(op)); }
  bool reduces(ReduceOp op) const { return has(reduceOps, static_cast<size_t>(op)); }
  bool carries(DataType t) const { return has(dtypes, static_cast<size_t>(t)); }
  bool reducesDtype(DataType t) const { return has(reducibleDtypes, static_cast<size_t>(t)); }

 private:
  template <size_t N>
  static bool has(const std::bitset<N>& bits, size_t i) {
    return i < N && bits[i];
  }
};

}  // namespace hora
