// Frame headers, always little endian byte by byte through core/common/wire.h (never a memcpy of a
// host integer), so peers on hosts of either byte order read the same values, and the encoding does
// not depend on alignment.
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

}  // namespace net
}  // namespace hora
