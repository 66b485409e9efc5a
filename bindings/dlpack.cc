#include "bindings/dlpack.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "bindings/gpu_intake.h"
#include "core/common/dtype.h"
#include "core/common/errors.h"

namespace py = pybind11;

namespace hora::bindings {
namespace {

constexpr const char* kCapsuleName = "dltensor";
constexpr const char* kUsedCapsuleName = "used_dltensor";

// The CUDA ordinal of an object whose __dlpack_device__ says kDLCUDA; nullopt otherwise.
std::optional<int> cudaDeviceOf(py::handle obj) {
  if (!py::hasattr(obj, "__dlpack_device__")) return std::nullopt;
  py::tuple dev = obj.attr("__dlpack_device__")();
  if (dev.size() != 2 || dev[0].cast<int>() != kDLCUDA) return std::nullopt;
  return dev[1].cast<int>();
}

// NCCL and the CUDA runtime of NVIDIA's wheels on sys.path are found by hora.common.gpu, which
// loads them before the engine opens the GPU path: asked once per process, at the first CUDA
// tensor (a CPU job never loads them).
void loadGpuWheelsOnce() {
  static bool asked = false;
  if (asked) return;
  asked = true;
  try {
    py::module_::import("hora.common.gpu").attr("ensure_loaded")();
  } catch (py::error_already_set&) {
    // Outside the hora package: the engine finds the libraries on its own search path, or says
    // why not.
  }
}

// Calls __dlpack__() (falling back to __dlpack__(stream=None) for producers that insist on the
// keyword) and turns the producer's BufferError into a ValueError.
py::object exportCapsule(py::handle obj) {
  if (PyCapsule_CheckExact(obj.ptr())) return py::reinterpret_borrow<py::object>(obj);
  if (!py::hasattr(obj, "__dlpack__")) {
    throw py::type_error(
        "expected a NumPy array, a tensor with __dlpack__ or a DLPack capsule, got " +
        std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  py::object method = obj.attr("__dlpack__");
  // A CUDA tensor is asked to order the device's intake stream after its producer's work
  // (DLPack's stream contract); a ready event recorded there later marks the data complete.
  if (std::optional<int> device = cudaDeviceOf(obj)) {
    loadGpuWheelsOnce();
    auto stream = reinterpret_cast<intptr_t>(intakeStream(*device));
    try {
      return method(py::arg("stream") = stream);
    } catch (py::error_already_set& e) {
      if (e.matches(PyExc_BufferError)) {
        throw InvalidArgument("cannot export the CUDA tensor through DLPack: " +
                              std::string(py::str(e.value())));
      }
      throw;
    }
  }
  auto rethrowBufferError = [](py::error_already_set& e) {
    if (e.matches(PyExc_BufferError)) {
      throw InvalidArgument("cannot export the tensor through DLPack: " +
                            std::string(py::str(e.value())));
    }
    throw;
  };
  try {
    return method();
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) rethrowBufferError(e);
  }
  try {
    return method(py::arg("stream") = py::none());
  } catch (py::error_already_set& e) {
    rethrowBufferError(e);
  }
  return py::none();  // not reached
}

DLManagedTensor* capsulePointer(const py::object& capsule) {
  const char* name = PyCapsule_GetName(capsule.ptr());
  if (name == nullptr) throw py::error_already_set();
  std::string n(name);
  if (n == kUsedCapsuleName) throw InvalidArgument("this DLPack capsule was already consumed");
  if (n != kCapsuleName) {
    throw InvalidArgument("not a DLPack capsule (capsule name '" + n +
                          "'); pass the tensor itself or a capsule named 'dltensor'");
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kCapsuleName));
  if (managed == nullptr) throw py::error_already_set();
  return managed;
}

bool dataTypeFromDlpack(const DLDataType& t, DataType* out) {
  if (t.lanes != 1) return false;
  switch (t.code) {
    case kDLInt:
      if (t.bits == 8) *out = DataType::Int8;
      else if (t.bits == 16) *out = DataType::Int16;
      else if (t.bits == 32) *out = DataType::Int32;
      else if (t.bits == 64) *out = DataType::Int64;
      else return false;
      return true;
    case kDLUInt:
      if (t.bits == 8) *out = DataType::UInt8;
      else if (t.bits == 16) *out = DataType::UInt16;
      else return false;
      return true;
    case kDLFloat:
      if (t.bits == 16) *out = DataType::Float16;
      else if (t.bits == 32) *out = DataType::Float32;
      else if (t.bits == 64) *out = DataType::Float64;
      else return false;
      return true;
    case kDLBfloat:
      if (t.bits != 16) return false;
      *out = DataType::BFloat16;
      return true;
    case kDLBool:
      if (t.bits != 8) return false;
      *out = DataType::Bool;
      return true;
    default: return false;
  }
}

DataType resolveDtype(const DLDataType& t, const std::optional<std::string>& dtypeOverride) {
  if (dtypeOverride) {
    DataType forced;
    if (!dtypeFromName(*dtypeOverride, &forced)) {
      throw InvalidArgument("unknown dtype override '" + *dtypeOverride + "'");
    }
    bool integral = t.code == kDLInt || t.code == kDLUInt || t.code == kDLBool;
    if (!integral || static_cast<size_t>(t.bits) * t.lanes != dtypeSize(forced) * 8) {
      throw InvalidArgument("dtype override '" + *dtypeOverride +
                            "' does not fit a tensor of type " + dlpackDtypeName(t) +
                            "; pass it as an integer type of the same width");
    }
    return forced;
  }
  DataType dtype;
  if (!dataTypeFromDlpack(t, &dtype)) {
    // Horovod's sentence first (scripts match it), then what would be accepted.
    throw InvalidArgument("Tensor type " + dlpackDtypeName(t) +
                          " is not supported. Supported: uint8, int8, uint16, int16, int32, "
                          "int64, float16, bfloat16, float32, float64 and bool.");
  }
  return dtype;
}

Device resolveDevice(const DLDevice& device) {
  if (device.device_type == kDLCPU) return Device::cpu();
  if (device.device_type == kDLCUDA) {
    requireGpu(device.device_id);  // names why the GPU path is off, if it is
    return Device::cuda(device.device_id);
  }
  throw InvalidArgument("tensor is on DLPack device type " + std::to_string(device.device_type) +
                        " (id " + std::to_string(device.device_id) +
                        "); Hora takes CPU (1) and CUDA (2) tensors; move it to the CPU");
}

bool isCompactRowMajor(const DLTensor& t) {
  if (t.strides == nullptr) return true;
  for (int i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 0) return true;  // empty: no element is ever addressed
  }
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

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

// What the DLManagedTensor of one export keeps alive.
struct ExportContext {
  std::shared_ptr<uint8_t> storage;
  std::vector<int64_t> shape;
  DLManagedTensor managed{};
};

}  // namespace

py::capsule exportTensor(const OutputTensor& out) {
  auto* ctx = new ExportContext{out.storage, out.shape};
  DLTensor& dl = ctx->managed.dl_tensor;
  dl.data = ctx->storage.get();
  dl.device = out.device.isCpu() ? DLDevice{kDLCPU, 0} : DLDevice{kDLCUDA, out.device.index};
  dl.ndim = static_cast<int32_t>(ctx->shape.size());
  dl.dtype = dlpackType(out.dtype);
  dl.shape = ctx->shape.data();
  dl.strides = nullptr;
  dl.byte_offset = 0;
  ctx->managed.manager_ctx = ctx;
  ctx->managed.deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
  };
  return py::capsule(&ctx->managed, kCapsuleName, [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, kCapsuleName)) {
      auto* m = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, kCapsuleName));
      if (m != nullptr && m->deleter != nullptr) m->deleter(m);
    }
  });
}

DlpackTensor::~DlpackTensor() {
  if (managed_ != nullptr && managed_->deleter != nullptr) managed_->deleter(managed_);
}

std::string dlpackDtypeName(const DLDataType& dtype) {
  std::string base;
  switch (dtype.code) {
    case kDLInt: base = "int"; break;
    case kDLUInt: base = "uint"; break;
    case kDLFloat: base = "float"; break;
    case kDLOpaqueHandle: base = "opaque"; break;
    case kDLBfloat: base = "bfloat"; break;
    case kDLComplex: base = "complex"; break;
    case kDLBool: base = "bool"; break;
    default: base = "code" + std::to_string(dtype.code) + "_"; break;
  }
  std::string name =
      (dtype.code == kDLBool && dtype.bits == 8) ? base : base + std::to_string(dtype.bits);
  if (dtype.lanes != 1) name += "x" + std::to_string(dtype.lanes);
  return name;
}

std::unique_ptr<DlpackTensor> importTensor(py::handle obj,
                                           const std::optional<std::string>& dtypeOverride) {
  py::object capsule = exportCapsule(obj);
  DLManagedTensor* managed = capsulePointer(capsule);
  const DLTensor& t = managed->dl_tensor;

  if (t.ndim < 0 || (t.ndim > 0 && t.shape == nullptr)) {
    throw InvalidArgument("malformed DLPack tensor: ndim " + std::to_string(t.ndim));
  }
  TensorView view;
  view.dtype = resolveDtype(t.dtype, dtypeOverride);
  view.device = resolveDevice(t.device);
  view.shape.assign(t.shape, t.shape + t.ndim);
  for (int64_t d : view.shape) {
    if (d < 0) throw InvalidArgument("malformed DLPack tensor: negative dimension");
  }
  if (!isCompactRowMajor(t)) {
    throw InvalidArgument(
        "tensor must be contiguous (row-major without gaps): pass tensor.contiguous() in torch, "
        "np.ascontiguousarray(array) in NumPy");
  }
  view.data = static_cast<char*>(t.data) + t.byte_offset;
  if (!view.device.isCpu()) {
    view.stream = intakeStream(view.device.index);
    view.readyEvent = recordReadyEvent(view.device.index);
  }

  // Only now, with nothing left to reject, does Hora take ownership.
  if (PyCapsule_SetName(capsule.ptr(), kUsedCapsuleName) != 0) throw py::error_already_set();
  return std::make_unique<DlpackTensor>(managed, std::move(view));
}

}  // namespace hora::bindings
