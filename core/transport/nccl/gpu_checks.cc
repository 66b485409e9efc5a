#include "core/transport/nccl/gpu_checks.h"

#include "core/common/errors.h"
#include "core/transport/nccl/communicator.h"

namespace hora::gpu {

void checkGpuRequest(const OpRequest& op, const GpuLibrary& lib, bool hierarchical) {
  const Request& r = op.request;
  const TensorView& t = op.tensor;
  const std::string what = "tensor '" + r.name + "' is on " + t.device.name();
  if (!lib.available()) {
    throw InvalidArgument(what + ", but the GPU path of Hora is off: " + lib.reason());
  }
  if (t.device.index < 0 || t.device.index >= lib.deviceCount()) {
    throw InvalidArgument(what + ", but CUDA reports " + std::to_string(lib.deviceCount()) +
                          " devices");
  }
  if (r.kind == OpKind::Adasum || r.reduceOp == ReduceOp::Adasum) {
    if (r.kind == OpKind::Allreduce || r.kind == OpKind::Adasum) {
      throw NotSupported(what + ": Adasum is not supported for GPU tensors; reduce a CPU copy");
    }
  }
  bool reduces = r.kind == OpKind::Allreduce || r.kind == OpKind::Reducescatter;
  int type;
  if (reduces && !ncclTypeOf(t.dtype, lib, &type)) {
    throw NotSupported(what + ": NCCL (" + ncclVersionString(lib.ncclVersion()) +
                       ") cannot reduce " + dtypeName(t.dtype) +
                       " tensors: cast them to a type it reduces (float32, float16, int32, ...; "
                       "bfloat16 needs NCCL 2.10 or later), or reduce a CPU copy");
  }
  bool scalesOnHost = hierarchical && r.kind == OpKind::Allreduce;
  if (reduces && (r.prescale != 1.0 || r.postscale != 1.0) && !scalesOnHost) {
    throw NotSupported(what +
                       ": prescale and postscale factors are not supported for GPU "
                       "tensors (except in the hierarchical allreduce); scale the tensor before "
                       "or after the call");
  }
}

}  // namespace hora::gpu
