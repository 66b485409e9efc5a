// Message headers, little endian byte by byte through core/common/wire.h, like every frame header.
// The checks run in the order that explains the most: a foreign stream first, then a peer of
// another version, then bits this version does not define (reserved for later flags, so a newer
// peer's message is refused instead of misread).
#include "core/p2p/message_header.h"

#include <cstring>

#include "core/common/wire.h"

namespace hora {
namespace p2p {

void encodeMessageHeader(const MessageHeader& h, uint8_t* out) {
  WireWriter w;
  w.u32(kMessageMagic).u16(kMessageVersion).u16(0).i64(h.tag).u64(h.length);
  std::memcpy(out, w.data().data(), kMessageHeaderBytes);
}

std::string decodeMessageHeader(const uint8_t* in, MessageHeader* out) {
  WireReader r(in, kMessageHeaderBytes);
  uint32_t magic = r.u32();
  uint16_t version = r.u16();
  uint16_t reserved = r.u16();
  int64_t tag = r.i64();
  uint64_t length = r.u64();
  if (magic != kMessageMagic) {
    return "bad message magic (not a hora point-to-point peer, or a corrupted stream)";
  }
  if (version != kMessageVersion) {
    return "unsupported point-to-point version " + std::to_string(version) +
           " (this build speaks " + std::to_string(kMessageVersion) + ")";
  }
  if (reserved != 0) return "reserved header bits set (" + std::to_string(reserved) + ")";
  out->tag = tag;
  out->length = length;
  return "";
}

}  // namespace p2p
}  // namespace hora
