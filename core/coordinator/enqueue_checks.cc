#include "core/coordinator/enqueue_checks.h"

#include <numeric>

#include "core/common/errors.h"

namespace hora {
namespace {

// The message is built only when the check fails: every submission passes here, and building
// the texts of checks that pass (string concatenations, allocations) cost most of the function.
template <typename Message>
void require(bool ok, Message&& message) {
  if (!ok) throw InvalidArgument(message());
}

bool needsRows(OpKind k) {
  return k == OpKind::Allgather || k == OpKind::Alltoall || k == OpKind::Reducescatter;
}

}  // namespace

void checkAndCompleteRequest(OpRequest& op, int worldRank, const ProcessSetTable& sets,
                             const Capabilities& data) {
  Request& r = op.request;
  const std::string& name = r.name;
  require(!name.empty(), [&] { return "every tensor needs a name"; });
  require(sets.contains(r.processSetId), [&] {
    return "process set " + std::to_string(r.processSetId) + " is not known (tensor '" + name +
           "')";
  });
  int setRank = sets.setRank(r.processSetId);
  require(setRank >= 0, [&] {
    return "tensor '" + name + "': Rank " + std::to_string(worldRank) +
           " is not a member of the provided process set.";
  });
  int setSize = sets.size(r.processSetId);

  if (r.kind == OpKind::Allreduce && r.reduceOp == ReduceOp::Adasum) r.kind = OpKind::Adasum;
  const OpKind kind = r.kind;
  const TensorView& t = op.tensor;
  if (isDataOp(kind)) {
    require(static_cast<int>(t.dtype) < kNumDataTypes,
            [&] { return "Tensor type is not supported."; });
    require(data.accepts(t.device), [&] {
      return "tensor '" + name + "' is on " + t.device.name() +
             ", but the transport of this job does not take tensors there; move it to the CPU";
    });
    for (int64_t d : t.shape)
      require(d >= 0, [&] { return "tensor '" + name + "' has a negative dimension"; });
    require(t.data != nullptr || t.numel() == 0,
            [&] { return "tensor '" + name + "' has no data"; });
  }
  if (needsRows(kind)) {
    require(!t.shape.empty(), [&] {
      return std::string(opKindName(kind)) + " of tensor '" + name +
             "' needs at least one dimension; got a scalar (rank-zero tensor)";
    });
  }
  if (kind == OpKind::Reducescatter) {
    require(r.reduceOp == ReduceOp::Sum || r.reduceOp == ReduceOp::Average,
            [&] { return "Reducescatter currently only supports AVERAGE and SUM."; });
  }
  if (kind == OpKind::Adasum) {
    require(isFloating(t.dtype), [&] {
      return "Adasum supports floating-point tensors only; '" + name + "' is " + dtypeName(t.dtype);
    });
  }
  if (kind == OpKind::Broadcast) {
    require(sets.setRankOf(r.processSetId, r.rootRank) >= 0, [&] {
      return "broadcast received invalid root rank " + std::to_string(r.rootRank) +
             " for provided process set (tensor '" + name + "')";
    });
  }
  if (kind == OpKind::Alltoall) {
    int64_t dim0 = t.shape[0];
    if (r.splits.empty()) {
      require(dim0 % setSize == 0, [&] {
        return "alltoall of '" + name + "' without splits needs the first dimension (" +
               std::to_string(dim0) + ") to be divisible by the number of ranks (" +
               std::to_string(setSize) + ")";
      });
      r.splits.assign(setSize, static_cast<int32_t>(dim0 / setSize));
    }
    require(static_cast<int>(r.splits.size()) == setSize, [&] {
      return "Number of entries in splits does not equal number of workers (tensor '" + name +
             "': " + std::to_string(r.splits.size()) + " splits, " + std::to_string(setSize) +
             " workers).";
    });
    int64_t sum = 0;
    for (int32_t s : r.splits) {
      require(s >= 0, [&] { return "alltoall splits of '" + name + "' must not be negative"; });
      sum += s;
    }
    require(sum <= dim0, [&] {
      return "alltoall splits of '" + name + "' add up to " + std::to_string(sum) +
             " rows, more than the tensor's first dimension (" + std::to_string(dim0) + ")";
    });
  }

  r.rank = worldRank;
  r.dtype = t.dtype;
  r.shape = t.shape;
  r.device = t.device.code();
}

}  // namespace hora
