#include "core/common/errors.h"

namespace hora {

void throwInternal(const char* file, int line, const std::string& message) {
  throw InternalError(std::string("[") + file + ":" + std::to_string(line) + "] " + message);
}

}  // namespace hora
