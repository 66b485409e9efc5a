#pragma once
// How hora::Error codes appear in Python (errors.cc translates exceptions by this table).
#include "core/common/errors.h"

namespace hora::bindings {

// The class in hora.errors raised for `code` ("MismatchError", ...), or null for the builtin
// ValueError (InvalidArgument).
const char* errorClassName(ErrorCode code);

}  // namespace hora::bindings
