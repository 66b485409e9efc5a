#pragma once
// Wire framing shared by the control plane and the TCP store. A frame is a fixed 12-byte header
// (magic, protocol version, type, payload length; little endian) followed by the payload. Each
// protocol has its own magic so a connection to the wrong port is recognised at once. A receiver
// that finds a bad magic, a version it does not speak, or a length above its limit drops the
// connection: the stream cannot be resynchronised.
//
// Payloads encode their fields with Writer / Reader (core/common/wire.h): little endian, and a
// Reader never reads past the end; it records the overrun and the caller checks ok().
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/common/wire.h"

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

// Payload fields use the one little-endian encoding of core/common/wire.h.
using Writer = WireWriter;
using Reader = WireReader;

}  // namespace net
}  // namespace hora
