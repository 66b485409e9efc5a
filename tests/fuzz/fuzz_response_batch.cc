// libFuzzer target: decodeResponseBatch, the coordinator's instructions every rank follows. Any
// input must either decode or throw IoError; a decoded batch must survive a round trip through
// the encoder unchanged.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/common/errors.h"
#include "core/coordinator/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  hora::ResponseBatch batch;
  try {
    batch = hora::decodeResponseBatch(bytes);
  } catch (const hora::IoError&) {
    return 0;
  }
  // Booleans decode any non-zero byte as true, so compare the canonical encodings.
  std::string once = hora::encodeResponseBatch(batch);
  std::string twice = hora::encodeResponseBatch(hora::decodeResponseBatch(once));
  if (once != twice) std::abort();
  return 0;
}
