#pragma once
// DeviceTensor (hora._core.DeviceTensor): an engine-allocated GPU result (allgather, alltoall,
// reducescatter) as Python sees it. It speaks DLPack (`__dlpack__`, `__dlpack_device__`), so
// `torch.from_dlpack(t)` wraps it zero-copy; the memory is freed when the last view is gone.
// The operation's handle completes only after the device finished writing it, so the data is
// readable from any stream and `stream=` needs no wait.
#include <pybind11/pybind11.h>

#include "core/common/tensor.h"

namespace hora::bindings {

pybind11::object wrapDeviceOutput(const OutputTensor& out);
void registerDeviceTensor(pybind11::module_& m);

}  // namespace hora::bindings
