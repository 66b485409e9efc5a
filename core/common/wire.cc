#include "core/common/wire.h"

#include <cstring>

namespace hora {

WireWriter& WireWriter::f64(double v) {
  static_assert(sizeof(double) == sizeof(uint64_t), "IEEE-754 double expected");
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return u64(bits);
}

WireWriter& WireWriter::bytes(const void* data, size_t n) {
  out_.append(static_cast<const char*>(data), n);
  return *this;
}

WireWriter& WireWriter::str(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  out_ += s;
  return *this;
}

bool WireReader::take(size_t n) {
  if (!ok_ || size_ - pos_ < n) {
    ok_ = false;
    return false;
  }
  return true;
}

double WireReader::f64() {
  uint64_t bits = u64();
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

void WireReader::bytes(void* out, size_t n) {
  if (!take(n)) {
    if (n > 0) std::memset(out, 0, n);
    return;
  }
  if (n > 0) std::memcpy(out, p_ + pos_, n);
  pos_ += n;
}

std::string WireReader::str() {
  uint32_t n = u32();
  if (!take(n)) return std::string();
  std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
  pos_ += n;
  return s;
}

uint32_t WireReader::count(size_t minBytesEach) {
  uint32_t n = u32();
  if (!ok_) return 0;
  if (minBytesEach > 0 && static_cast<uint64_t>(n) * minBytesEach > remaining()) {
    ok_ = false;
    return 0;
  }
  return n;
}

}  // namespace hora
