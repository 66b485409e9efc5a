#pragma once
// How hora::Error codes appear in Python (errors.cc translates exceptions by this table).
#include "core/common/errors.h"

namespace hora::bindings {

// The class in hora.errors raised for `code` ("MismatchError", ...), or null for the builtin
// ValueError (InvalidArgument).
const char* errorClassName(ErrorCode code);

// Sets the Python error for the exception being handled, as the module's translator does: for
// functions called by Python without pybind11's dispatch (submit.cc). Call inside a catch block.
void setPythonErrorFromCurrent();

}  // namespace hora::bindings
