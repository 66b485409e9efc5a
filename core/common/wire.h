#pragma once
// Little-endian encoding of the fields Hora sends between ranks (negotiation messages, frame
// headers, store requests). Values are written byte by byte, least significant first, so the bytes
// on the wire are the same whatever the host's byte order; doubles travel as their IEEE-754 bit
// pattern. Strings and vectors are prefixed with a u32 count.
//
// WireReader never reads past the end: a read that does not fit returns zero (or empty), marks the
// reader failed, and every later read fails too. Callers check ok() once after decoding, or throw
// early with require(). A count is checked against the bytes left before anything is allocated,
// so a corrupt length cannot make the reader reserve gigabytes.
//
// Not thread-safe; one writer or reader per message.
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace hora {

class WireWriter {
 public:
  WireWriter& u8(uint8_t v) { return put(v); }
  WireWriter& u16(uint16_t v) { return put(v); }
  WireWriter& u32(uint32_t v) { return put(v); }
  WireWriter& u64(uint64_t v) { return put(v); }
  WireWriter& i32(int32_t v) { return put(v); }
  WireWriter& i64(int64_t v) { return put(v); }
  WireWriter& f64(double v);
  WireWriter& boolean(bool v) { return u8(v ? 1 : 0); }
  WireWriter& bytes(const void* data, size_t n);
  WireWriter& str(const std::string& s);  // u32 length, then the bytes

  // u32 count, then each element; integer elements only.
  template <typename T>
  WireWriter& vec(const std::vector<T>& v) {
    u32(static_cast<uint32_t>(v.size()));
    for (T x : v) put(x);
    return *this;
  }

  const std::string& data() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  template <typename T>
  WireWriter& put(T v) {
    static_assert(std::is_integral<T>::value, "integers only");
    using U = typename std::make_unsigned<T>::type;
    U u = static_cast<U>(v);
    for (size_t i = 0; i < sizeof(T); ++i) out_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
    return *this;
  }

  std::string out_;
};

class WireReader {
 public:
  WireReader(const void* data, size_t size) : p_(static_cast<const uint8_t*>(data)), size_(size) {}
  explicit WireReader(const std::string& s) : WireReader(s.data(), s.size()) {}

  uint8_t u8() { return get<uint8_t>(); }
  uint16_t u16() { return get<uint16_t>(); }
  uint32_t u32() { return get<uint32_t>(); }
  uint64_t u64() { return get<uint64_t>(); }
  int32_t i32() { return get<int32_t>(); }
  int64_t i64() { return get<int64_t>(); }
  double f64();
  bool boolean() { return u8() != 0; }
  void bytes(void* out, size_t n);  // zero-filled on failure
  std::string str();

  // A u32 count of items that each take at least minBytesEach bytes; 0 (and failed) when that many
  // items cannot fit in what is left.
  uint32_t count(size_t minBytesEach);

  template <typename T>
  std::vector<T> vec() {
    uint32_t n = count(sizeof(T));
    std::vector<T> v;
    v.reserve(n);
    for (uint32_t i = 0; i < n; ++i) v.push_back(get<T>());
    return v;
  }

  bool ok() const { return ok_; }
  bool atEnd() const { return pos_ == size_; }
  size_t remaining() const { return size_ - pos_; }

 private:
  bool take(size_t n);

  template <typename T>
  T get() {
    static_assert(std::is_integral<T>::value, "integers only");
    using U = typename std::make_unsigned<T>::type;
    if (!take(sizeof(T))) return 0;
    U u = 0;
    for (size_t i = 0; i < sizeof(T); ++i)
      u = static_cast<U>(u | (static_cast<U>(p_[pos_ + i]) << (8 * i)));
    pos_ += sizeof(T);
    return static_cast<T>(u);
  }

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace hora
