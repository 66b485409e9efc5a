// libFuzzer target: WireReader, the primitive every payload decoder is built on, driven by a
// fuzzer-chosen sequence of reads over fuzzer-chosen bytes. Checks its contract: no read goes past
// the end, a failed reader stays failed and consumes nothing more, and a count never exceeds what
// the remaining bytes can hold.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/common/wire.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  size_t opCount = in.ConsumeIntegralInRange<size_t>(0, 64);
  std::vector<uint8_t> ops = in.ConsumeBytes<uint8_t>(opCount);
  std::string payload = in.ConsumeRemainingBytesAsString();
  hora::WireReader r(payload);
  for (uint8_t op : ops) {
    bool wasOk = r.ok();
    size_t before = r.remaining();
    switch (op % 11) {
      case 0: r.u8(); break;
      case 1: r.u16(); break;
      case 2: r.u32(); break;
      case 3: r.u64(); break;
      case 4: r.i32(); break;
      case 5: r.i64(); break;
      case 6: r.f64(); break;
      case 7: check(r.str().size() <= before); break;
      case 8: check(r.vec<int64_t>().size() * sizeof(int64_t) <= before); break;
      case 9: {
        size_t each = op / 11 % 9;
        uint64_t n = r.count(each);
        check(each == 0 || n * each <= r.remaining());
        break;
      }
      default: {
        uint8_t out[16];
        r.bytes(out, op % sizeof(out));
        break;
      }
    }
    check(r.remaining() <= before && r.remaining() <= payload.size());
    if (!wasOk) check(!r.ok() && r.remaining() == before);
  }
  check(r.atEnd() == (r.remaining() == 0));
  return 0;
}
