#include "core/common/errors.h"
#include "core/ops/ops.h"

namespace hora {

AlltoallPlan planAlltoall(const Response& r, int n, int me) {
  const size_t rowBytes = static_cast<size_t>(r.rowElements[0]) * dtypeSize(r.dtype);
  AlltoallPlan plan;
  plan.sendBytes.resize(n);
  plan.recvBytes.resize(n);
  plan.received.resize(n);
  for (int j = 0; j < n; ++j) {
    plan.sendBytes[j] =
        static_cast<size_t>(r.splitsMatrix[static_cast<size_t>(me) * n + j]) * rowBytes;
    plan.received[j] = static_cast<int32_t>(r.splitsMatrix[static_cast<size_t>(j) * n + me]);
    plan.recvBytes[j] = static_cast<size_t>(plan.received[j]) * rowBytes;
    plan.rows += plan.received[j];
  }
  return plan;
}

void runAlltoall(const Response& r, OpContext& cx) {
  TensorEntry* e = cx.entries.at(0);
  HORA_CHECK(e != nullptr, "alltoall without a local tensor");
  AlltoallPlan plan = planAlltoall(r, cx.comm.size(), cx.comm.rank());
  std::vector<int64_t> shape = e->tensor.shape;
  shape[0] = plan.rows;
  OutputTensor out = OutputTensor::allocate(r.dtype, shape);
  {
    ActivityScope a(cx, r, TransportActivity{"ALLTOALL"});
    cx.comm.alltoallv(e->tensor.data, plan.sendBytes, out.data(), plan.recvBytes);
  }
  e->handle->output = std::move(out);
  e->handle->receivedSplits = std::move(plan.received);
}

}  // namespace hora
