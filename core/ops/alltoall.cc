#include "core/common/errors.h"
#include "core/ops/ops.h"

namespace hora {

// splitsMatrix[i * n + j] rows go from set rank i to set rank j.
void runAlltoall(const Response& r, OpContext& cx) {
  const int n = cx.comm.size(), me = cx.comm.rank();
  TensorEntry* e = cx.entries.at(0);
  HORA_CHECK(e != nullptr, "alltoall without a local tensor");
  const size_t rowBytes = static_cast<size_t>(r.rowElements[0]) * dtypeSize(r.dtype);
  std::vector<size_t> sendBytes(n), recvBytes(n);
  std::vector<int32_t> received(n);
  int64_t rows = 0;
  for (int j = 0; j < n; ++j) {
    sendBytes[j] = static_cast<size_t>(r.splitsMatrix[static_cast<size_t>(me) * n + j]) * rowBytes;
    received[j] = static_cast<int32_t>(r.splitsMatrix[static_cast<size_t>(j) * n + me]);
    recvBytes[j] = static_cast<size_t>(received[j]) * rowBytes;
    rows += received[j];
  }
  std::vector<int64_t> shape = e->tensor.shape;
  shape[0] = rows;
  OutputTensor out = OutputTensor::allocate(r.dtype, shape);
  {
    ActivityScope a(cx, r, collectiveActivity(cx, "ALLTOALL"));
    cx.comm.alltoallv(e->tensor.data, sendBytes, out.data(), recvBytes);
  }
  e->handle->output = std::move(out);
  e->handle->receivedSplits = std::move(received);
}

}  // namespace hora
