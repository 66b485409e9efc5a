// libFuzzer target: decodeRequestBatch, the message every rank sends the coordinator over the
// control channel. Any input must either decode or throw IoError; a decoded batch must survive a
// round trip through the encoder unchanged (the decoder accepted nothing the encoder cannot say).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/common/errors.h"
#include "core/coordinator/codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  hora::RequestBatch batch;
  try {
    batch = hora::decodeRequestBatch(bytes);
  } catch (const hora::IoError&) {
    return 0;
  }
  // Booleans decode any non-zero byte as true, so compare the canonical encodings.
  std::string once = hora::encodeRequestBatch(batch);
  std::string twice = hora::encodeRequestBatch(hora::decodeRequestBatch(once));
  if (once != twice) std::abort();
  return 0;
}
