#include "bindings/device_tensor.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bindings/dlpack.h"
#include "bindings/register.h"
#include "core/common/errors.h"
#include "third_party/dlpack/dlpack.h"

namespace py = pybind11;

namespace hora::bindings {
namespace {

struct DeviceTensor {
  OutputTensor out;
};

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
            return exportTensor(t.out);
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
