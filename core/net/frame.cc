// Frame headers and payload fields, always little endian byte by byte (never a memcpy of a host
// integer), so peers on hosts of either byte order read the same values, and the encoding does not
// depend on alignment.
//
// Header layout (kFrameHeaderBytes = 12):  magic u32 | version u16 | type u16 | length u32
// The magic comes first so the very first read tells a foreign or misdirected stream apart; the
// version next so an incompatible peer is named as such instead of failing later on a payload;
// the length last, checked against the receiver's limit before any payload is buffered, so a
// corrupt or hostile length cannot make the receiver allocate gigabytes.
#include "core/net/frame.h"

#include <cstring>

namespace hora {
namespace net {

void encodeHeader(const FrameHeader& h, uint8_t* out) {
  Writer w;
  w.u32(h.magic).u16(h.version).u16(h.type).u32(h.length);
  std::memcpy(out, w.data().data(), kFrameHeaderBytes);
}

FrameHeader decodeHeader(const uint8_t* in) {
  Reader r(in, kFrameHeaderBytes);
  FrameHeader h;
  h.magic = r.u32();
  h.version = r.u16();
  h.type = r.u16();
  h.length = r.u32();
  return h;
}

// Checked in the order a human would want to read the answer: wrong protocol first (nothing else
// about the frame means anything then), then wrong version, then size.
std::string validateHeader(const FrameHeader& h, uint32_t magic, uint32_t maxLength) {
  if (h.magic != magic) return "bad frame magic (not a hora peer, or the wrong port)";
  if (h.version != kProtocolVersion) {
    return "unsupported protocol version " + std::to_string(h.version) + " (this build speaks " +
           std::to_string(kProtocolVersion) + ")";
  }
  if (h.length > maxLength) {
    return "frame length " + std::to_string(h.length) + " exceeds the limit of " +
           std::to_string(maxLength) + " bytes";
  }
  return "";
}

std::string buildFrame(uint32_t magic, uint16_t type, const std::string& payload) {
  FrameHeader h;
  h.magic = magic;
  h.type = type;
  h.length = static_cast<uint32_t>(payload.size());
  std::string out(kFrameHeaderBytes, '\0');
  encodeHeader(h, reinterpret_cast<uint8_t*>(&out[0]));
  out += payload;
  return out;
}

Writer& Writer::u8(uint8_t v) {
  out_.push_back(static_cast<char>(v));
  return *this;
}

Writer& Writer::u16(uint16_t v) {
  for (int i = 0; i < 2; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  return *this;
}

Writer& Writer::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  return *this;
}

Writer& Writer::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  return *this;
}

Writer& Writer::bytes(const void* data, size_t n) {
  out_.append(static_cast<const char*>(data), n);
  return *this;
}

Writer& Writer::str(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  out_ += s;
  return *this;
}

// Every read goes through take(): an overrun marks the reader failed and later reads return zeros,
// so a decoder can read a whole message and check ok() once instead of after every field, and a
// truncated payload can never read past its buffer.
bool Reader::take(size_t n) {
  if (!ok_ || size_ - pos_ < n) {
    ok_ = false;
    return false;
  }
  return true;
}

uint8_t Reader::u8() {
  if (!take(1)) return 0;
  return p_[pos_++];
}

uint16_t Reader::u16() {
  if (!take(2)) return 0;
  uint16_t v = uint16_t(p_[pos_] | (p_[pos_ + 1] << 8));
  pos_ += 2;
  return v;
}

uint32_t Reader::u32() {
  if (!take(4)) return 0;
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(p_[pos_ + i]) << (8 * i);
  pos_ += 4;
  return v;
}

uint64_t Reader::u64() {
  if (!take(8)) return 0;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p_[pos_ + i]) << (8 * i);
  pos_ += 8;
  return v;
}

void Reader::bytes(void* out, size_t n) {
  if (!take(n)) {
    std::memset(out, 0, n);
    return;
  }
  std::memcpy(out, p_ + pos_, n);
  pos_ += n;
}

std::string Reader::str() {
  // The length is untrusted: take() checks it against what is left before anything is allocated.
  uint32_t n = u32();
  if (!take(n)) return std::string();
  std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
  pos_ += n;
  return s;
}

}  // namespace net
}  // namespace hora
