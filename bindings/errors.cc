// The one exception translator of hora._core: hora::Error by code to the classes of hora.errors
// (InvalidArgument to the builtin ValueError), any other std::exception to InternalError.
// pybind11's own exceptions (Python errors, cast errors, py::value_error...) pass through.
#include <pybind11/pybind11.h>

#include <exception>
#include <new>

#include "bindings/errors.h"
#include "bindings/register.h"
#include "core/common/errors.h"

namespace py = pybind11;

namespace hora::bindings {

const char* errorClassName(ErrorCode code) {
  switch (code) {
    case ErrorCode::Internal: return "InternalError";
    case ErrorCode::InvalidArgument: return nullptr;  // builtin ValueError
    case ErrorCode::Mismatch: return "MismatchError";
    case ErrorCode::Io: return "TransportError";
    case ErrorCode::Timeout: return "HoraTimeoutError";
    case ErrorCode::NotSupported: return "NotSupportedError";
    case ErrorCode::Shutdown: return "ShutdownError";
    case ErrorCode::InvalidCollective: return "InvalidCollectiveError";
  }
  return "InternalError";
}

namespace {

// hora.errors is imported lazily so that the module loads even outside the hora package; there
// the errors degrade to RuntimeError.
void raise(const char* name, const char* message) {
  if (name == nullptr) {
    PyErr_SetString(PyExc_ValueError, message);
    return;
  }
  try {
    py::object cls = py::module_::import("hora.errors").attr(name);
    PyErr_SetString(cls.ptr(), message);
  } catch (py::error_already_set&) {
    PyErr_SetString(PyExc_RuntimeError, message);
  }
}

}  // namespace

void setPythonErrorFromCurrent() {
  try {
    throw;
  } catch (const Error& e) {
    raise(errorClassName(e.code()), e.what());
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    raise("InternalError", e.what());
  } catch (...) {
    raise("InternalError", "unknown C++ exception");
  }
}

void registerErrors(py::module_& /*m*/) {
  py::register_exception_translator([](std::exception_ptr p) {
    if (!p) return;
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      raise(errorClassName(e.code()), e.what());
    } catch (const py::error_already_set&) {
      throw;
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const std::bad_alloc&) {
      throw;
    } catch (const std::exception& e) {
      raise("InternalError", e.what());
    }
  });
}

}  // namespace hora::bindings
