#include "core/coordinator/enqueue_checks.h"

#include <algorithm>
#include <cctype>
#include <string>

#include "core/common/errors.h"

namespace hora {
namespace {

// The message is built only when the check fails: every submission passes here, and building
// the texts of checks that pass (string concatenations, allocations) cost most of the function.
template <typename Message>
void require(bool ok, Message&& message) {
  if (!ok) throw InvalidArgument(message());
}

// Horovod raises HorovodInternalError for these; InvalidCollectiveError is that and a ValueError.
template <typename Message>
void requireCollective(bool ok, Message&& message) {
  if (!ok) throw InvalidCollectiveError(message());
}

bool needsRows(OpKind k) {
  return k == OpKind::Allgather || k == OpKind::Alltoall || k == OpKind::Reducescatter;
}

// "allreduce": the operation as the frontends spell it, opening each message.
std::string what(OpKind kind) {
  std::string name = opKindName(kind);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name;
}

std::string tensorNamed(const std::string& name) { return "(tensor '" + name + "')"; }

void checkAlltoallSplits(Request& r, const std::string& name, int64_t dim0, int setSize) {
  if (r.splits.empty()) {
    requireCollective(dim0 % setSize == 0, [&] {
      return "alltoall without splits needs the first dimension (" + std::to_string(dim0) +
             ") to be divisible by the number of workers (" + std::to_string(setSize) +
             "); pass splits otherwise " + tensorNamed(name);
    });
    r.splits.assign(setSize, static_cast<int32_t>(dim0 / setSize));
  }
  requireCollective(static_cast<int>(r.splits.size()) == setSize, [&] {
    return "Number of entries in splits does not equal number of workers. (tensor '" + name +
           "': " + std::to_string(r.splits.size()) + " splits, " + std::to_string(setSize) +
           " workers)";
  });
  int64_t sum = 0;
  for (int32_t s : r.splits) {
    require(s >= 0, [&] { return "alltoall splits of '" + name + "' must not be negative"; });
    sum += s;
  }
  requireCollective(sum <= dim0, [&] {
    return "Sum of splits entries is greater than the first dimension of tensor. (tensor '" + name +
           "': " + std::to_string(sum) + " rows, first dimension " + std::to_string(dim0) + ")";
  });
}

// A request on a device, against the limits of the backend that carries it (capabilities.h):
// the path being on, the device existing, then what the backend cannot run (NotSupported).
void checkDeviceLimits(const OpRequest& op, const Capabilities& device, bool hierarchical) {
  const Request& r = op.request;
  const TensorView& t = op.tensor;
  auto what = [&] { return "tensor '" + r.name + "' is on " + t.device.name(); };
  require(device.offReason.empty(),
          [&] { return what() + ", but the GPU path of Hora is off: " + device.offReason; });
  bool exists =
      device.deviceCount < 0 || (t.device.index >= 0 && t.device.index < device.deviceCount);
  require(exists, [&] {
    return what() + ", but " + device.deviceRuntime + " reports " +
           std::to_string(device.deviceCount) + " devices";
  });
  bool allreduces = r.kind == OpKind::Allreduce || r.kind == OpKind::Adasum;
  bool adasum = r.kind == OpKind::Adasum || r.reduceOp == ReduceOp::Adasum;
  if (allreduces && adasum && !device.adasum) {
    throw NotSupported(what() + ": Adasum is not supported for GPU tensors; reduce a CPU copy");
  }
  bool reduces = r.kind == OpKind::Allreduce || r.kind == OpKind::Reducescatter;
  if (reduces && !device.reducesDtype(t.dtype)) {
    throw NotSupported(what() + ": " + device.reducer + " cannot reduce " + dtypeName(t.dtype) +
                       " tensors: cast them to a type it reduces (" + device.reducibleHint +
                       "), or reduce a CPU copy");
  }
  bool hierarchicalAllreduce = hierarchical && r.kind == OpKind::Allreduce;
  bool scales = hierarchicalAllreduce ? device.scaleFactorsHierarchical : device.scaleFactors;
  if (reduces && (r.prescale != 1.0 || r.postscale != 1.0) && !scales) {
    throw NotSupported(what() +
                       ": prescale and postscale factors are not supported for GPU "
                       "tensors (except in the hierarchical allreduce); scale the tensor before "
                       "or after the call");
  }
}

}  // namespace

void checkAndCompleteRequest(OpRequest& op, int worldRank, const ProcessSetTable& sets,
                             const Capabilities& data, bool hierarchical) {
  Request& r = op.request;
  if (!op.tensor.device.isCpu() && isDataOp(r.kind)) checkDeviceLimits(op, data, hierarchical);
  const std::string& name = r.name;
  require(!name.empty(), [&] { return "every tensor needs a name"; });
  require(static_cast<int>(r.reduceOp) <= static_cast<int>(ReduceOp::Product), [&] {
    return what(r.kind) + ": unknown reduce op " + std::to_string(static_cast<int>(r.reduceOp));
  });
  const std::optional<ProcessSetTable::Place> place = sets.place(r.processSetId);
  require(place.has_value(), [&] {
    std::string id = r.processSetId < 0 ? "" : " (id " + std::to_string(r.processSetId) + ")";
    return what(r.kind) + ": the process set" + id + " of tensor '" + name +
           "' is not registered; pass it to hora.init(process_sets=[...]) or "
           "hora.add_process_set() first";
  });
  require(place->setRank >= 0, [&] {
    return what(r.kind) + ": Rank " + std::to_string(worldRank) +
           " is not a member of the provided process set. " + tensorNamed(name);
  });
  const int setSize = place->size;

  const OpKind asked = r.kind;
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
      return what(asked) + " needs a tensor of at least one dimension; reshape the scalar to [1] " +
             tensorNamed(name);
    });
  }
  if (kind == OpKind::Reducescatter) {
    requireCollective(r.reduceOp == ReduceOp::Sum || r.reduceOp == ReduceOp::Average,
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
             " for provided process set " + tensorNamed(name);
    });
  }
  if (kind == OpKind::Alltoall) checkAlltoallSplits(r, name, t.shape[0], setSize);

  r.rank = worldRank;
  r.dtype = t.dtype;
  r.shape = t.shape;
  r.device = t.device.code();
}

}  // namespace hora
