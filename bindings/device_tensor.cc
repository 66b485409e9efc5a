#include "bindings/device_tensor.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings/register.h"
#include "core/common/errors.h"
#include "third_party/dlpack/dlpack.h"

namespace py = pybind11;

namespace hora::bindings {
namespace {

struct DeviceTensor {
  OutputTensor out;
};

// What the DLManagedTensor of one export keeps alive.
struct ExportContext {
  std::shared_ptr<uint8_t> storage;
  std::vector<int64_t> shape;
  DLManagedTensor managed{};
};

DLDataType dlpackType(DataType t) {
  DLDataType d{};
  d.lanes = 1;
  d.bits = static_cast<uint8_t>(dtypeSize(t) * 8);
  switch (t) {
    case DataType::Int8:
    case DataType::Int16:
    case DataType::Int32:
    case DataType::Int64: d.code = kDLInt; break;
    case DataType::UInt8:
    case DataType::UInt16: d.code = kDLUInt; break;
    case DataType::BFloat16: d.code = kDLBfloat; break;
    case DataType::Bool: d.code = kDLBool; break;
    default: d.code = kDLFloat; break;
  }
  return d;
}

py::capsule exportCapsule(const DeviceTensor& t) {
  auto* ctx = new ExportContext{t.out.storage, t.out.shape};
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = ctx->storage.get();
  dl.device = DLDevice{kDLCUDA, t.out.device.index};
  dl.ndim = static_cast<int32_t>(ctx->shape.size());
  dl.dtype = dlpackType(t.out.dtype);
  dl.shape = ctx->shape.data();
  dl.strides = nullptr;
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
  };
  // A capsule nobody consumed still frees its tensor.
  return py::capsule(&ctx->managed, "dltensor", [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, "dltensor")) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, "dltensor"));
      if (m != nullptr && m->deleter != nullptr) m->deleter(m);
    }
  });
}

}  // namespace

py::object wrapDeviceOutput(const OutputTensor& out) { return py::cast(DeviceTensor{out}); }

void registerDeviceTensor(py::module_& m) {
  py::class_<DeviceTensor>(m, "DeviceTensor",
                           "A GPU result of the engine; use it through DLPack "
                           "(torch.from_dlpack(t)).")
      .def(
          "__dlpack__",
          [](const DeviceTensor& t, py::object /*stream*/, py::object /*maxVersion*/,
             py::object /*dlDevice*/, py::object copy) {
            if (!copy.is_none() && copy.cast<bool>()) {
              throw py::buffer_error("DeviceTensor cannot export a copy");
            }
            return exportCapsule(t);
          },
          py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__",
           [](const DeviceTensor& t) { return py::make_tuple(int(kDLCUDA), t.out.device.index); })
      .def_property_readonly(
          "data_ptr",
          [](const DeviceTensor& t) { return reinterpret_cast<uintptr_t>(t.out.storage.get()); })
      .def_property_readonly("shape", [](const DeviceTensor& t) { return t.out.shape; })
      .def_property_readonly(
          "dtype", [](const DeviceTensor& t) { return std::string(dtypeName(t.out.dtype)); })
      .def_property_readonly("nbytes", [](const DeviceTensor& t) {
        int64_t n = 1;
        for (int64_t d : t.out.shape) n *= d;
        return static_cast<int64_t>(n * static_cast<int64_t>(dtypeSize(t.out.dtype)));
      });
}

}  // namespace hora::bindings
