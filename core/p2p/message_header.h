#pragma once
// The header in front of every point-to-point message. After the handshake a connection carries
// nothing but messages, each a fixed 24-byte header followed by `length` payload bytes:
//
//   magic u32 "HP2P" | version u16 | reserved u16 (0) | tag i64 | length u64     (little endian)
//
// The magic differs from every other protocol's (core/net/frame.h), so a connection that reached
// the wrong port fails at its first message. The length has no limit here: receivers size their
// buffers from the bytes that actually arrive (see mailbox.h), never from this field alone.
// Pure functions; thread-safe.
#include <cstddef>
#include <cstdint>
#include <string>

namespace hora {
namespace p2p {

constexpr uint32_t kMessageMagic = 0x50325048;  // "HP2P"
constexpr uint16_t kMessageVersion = 1;
constexpr size_t kMessageHeaderBytes = 24;

struct MessageHeader {
  int64_t tag = 0;
  uint64_t length = 0;
};

// Writes kMessageHeaderBytes at out.
void encodeMessageHeader(const MessageHeader& h, uint8_t* out);
// Reads kMessageHeaderBytes at in: "" and *out filled when they are a header of this version,
// otherwise why not (bad magic, another version, reserved bits set); *out is then unchanged.
std::string decodeMessageHeader(const uint8_t* in, MessageHeader* out);

}  // namespace p2p
}  // namespace hora
