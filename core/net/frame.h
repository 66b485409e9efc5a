#pragma once
// Wire framing shared by the control plane and the TCP store. A frame is a fixed 12-byte header
// (magic, protocol version, type, payload length; little endian) followed by the payload. Each
// protocol has its own magic so a connection to the wrong port is recognised at once. A receiver
// that finds a bad magic, a version it does not speak, or a length above its limit drops the
// connection: the stream cannot be resynchronised.
//
// Also: little-endian field encoding for payloads (Writer / Reader). Reader never reads past the
// end; it records the overrun and the caller checks ok().
#include <cstddef>
#include <cstdint>
#include <string>

namespace hora {
namespace net {

constexpr uint16_t kProtocolVersion = 1;
constexpr uint32_t kControlMagic = 0x4c544348;    // "HCTL"
constexpr uint32_t kStoreMagic = 0x52545348;      // "HSTR"
constexpr uint32_t kHandshakeMagic = 0x4b485348;  // "HSHK"
constexpr size_t kFrameHeaderBytes = 12;

struct FrameHeader {
  uint32_t magic = 0;
  uint16_t version = kProtocolVersion;
  uint16_t type = 0;
  uint32_t length = 0;
};

void encodeHeader(const FrameHeader& h, uint8_t* out);  // writes kFrameHeaderBytes
FrameHeader decodeHeader(const uint8_t* in);
// "" when the header is acceptable, otherwise why not.
std::string validateHeader(const FrameHeader& h, uint32_t magic, uint32_t maxLength);
// Header followed by payload, ready to send.
std::string buildFrame(uint32_t magic, uint16_t type, const std::string& payload);

class Writer {
 public:
  Writer& u8(uint8_t v);
  Writer& u16(uint16_t v);
  Writer& u32(uint32_t v);
  Writer& u64(uint64_t v);
  Writer& i64(int64_t v) { return u64(static_cast<uint64_t>(v)); }
  Writer& bytes(const void* data, size_t n);
  Writer& str(const std::string& s);  // u32 length + bytes
  const std::string& data() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  Reader(const void* data, size_t size) : p_(static_cast<const uint8_t*>(data)), size_(size) {}
  explicit Reader(const std::string& s) : Reader(s.data(), s.size()) {}
  uint8_t u8();
  uint16_t u16();
  uint32_t u32();
  uint64_t u64();
  int64_t i64() { return static_cast<int64_t>(u64()); }
  void bytes(void* out, size_t n);
  std::string str();
  bool ok() const { return ok_; }
  bool atEnd() const { return pos_ == size_; }

 private:
  bool take(size_t n);

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace net
}  // namespace hora
