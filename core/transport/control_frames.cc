#include "core/transport/control_frames.h"

#include "core/net/frame.h"

namespace hora {
namespace {

constexpr uint16_t kMessageType = 1;

}  // namespace

std::string controlFrame(const std::string& message) {
  return net::buildFrame(net::kControlMagic, kMessageType, message);
}

std::string takeControlMessages(int from, std::string& buffer,
                                std::vector<ControlChannel::Message>& out) {
  size_t at = 0;
  std::string bad;
  while (buffer.size() - at >= net::kFrameHeaderBytes) {
    net::FrameHeader h = net::decodeHeader(reinterpret_cast<const uint8_t*>(buffer.data() + at));
    // The header, its length included, is validated before the body is waited for, so a frame
    // that claims more than the limit is refused at once instead of being waited for.
    bad = net::validateHeader(h, net::kControlMagic, kMaxControlMessageBytes);
    if (bad.empty() && h.type != kMessageType) bad = "unknown frame type " + std::to_string(h.type);
    if (!bad.empty()) break;
    // An incomplete frame stays in the buffer until the rest of it arrives.
    if (buffer.size() - at < net::kFrameHeaderBytes + h.length) break;
    out.push_back({from, buffer.substr(at + net::kFrameHeaderBytes, h.length)});
    at += net::kFrameHeaderBytes + h.length;
  }
  // Consumed bytes are erased once, after the loop, rather than once per frame.
  buffer.erase(0, at);
  return bad;
}

}  // namespace hora
