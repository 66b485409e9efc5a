#include "core/transport/control_frames.h"

#include "core/net/frame.h"

namespace hora {
namespace {

constexpr uint16_t kDirect = static_cast<uint16_t>(ControlFrameType::Direct);
constexpr uint16_t kRouted = static_cast<uint16_t>(ControlFrameType::Routed);
constexpr uint16_t kSubtree = static_cast<uint16_t>(ControlFrameType::Subtree);
// A routed frame's rank field.
constexpr uint32_t kRankBytes = 4;

// The frames at the front of `buffer`, each handed to `take(header, at)` once whole; a partial
// one stays. `accepts(type)` says which types this reader speaks.
template <typename Accepts, typename Take>
std::string takeFrames(std::string& buffer, Accepts accepts, Take take) {
  size_t at = 0;
  std::string bad;
  while (buffer.size() - at >= net::kFrameHeaderBytes) {
    net::FrameHeader h = net::decodeHeader(reinterpret_cast<const uint8_t*>(buffer.data() + at));
    // The header, its length included, is validated before the body is waited for, so a frame
    // that claims more than the limit is refused at once instead of being waited for.
    bad = net::validateHeader(h, net::kControlMagic, kMaxControlMessageBytes + kRankBytes);
    if (bad.empty() && !accepts(h.type)) bad = "unknown frame type " + std::to_string(h.type);
    if (bad.empty() && h.type == kRouted && h.length < kRankBytes) bad = "routed frame too short";
    if (bad.empty() && h.type != kRouted && h.length > kMaxControlMessageBytes) {
      bad = "frame of " + std::to_string(h.length) + " bytes exceeds the limit";
    }
    if (!bad.empty()) break;
    // An incomplete frame stays in the buffer until the rest of it arrives.
    if (buffer.size() - at < net::kFrameHeaderBytes + h.length) break;
    take(h, at);
    at += net::kFrameHeaderBytes + h.length;
  }
  // Consumed bytes are erased once, after the loop, rather than once per frame.
  buffer.erase(0, at);
  return bad;
}

}  // namespace

std::string controlFrame(const std::string& message) {
  return net::buildFrame(net::kControlMagic, kDirect, message);
}

std::string routedControlFrame(int rank, const std::string& message) {
  net::Writer w;
  w.u32(static_cast<uint32_t>(rank));
  std::string payload = w.take();
  payload += message;
  return net::buildFrame(net::kControlMagic, kRouted, payload);
}

std::string subtreeControlFrame(const std::string& message) {
  return net::buildFrame(net::kControlMagic, kSubtree, message);
}

std::string takeControlMessages(int from, std::string& buffer,
                                std::vector<ControlChannel::Message>& out) {
  return takeFrames(
      buffer, [](uint16_t type) { return type == kDirect; },
      [&](const net::FrameHeader& h, size_t at) {
        out.push_back({from, buffer.substr(at + net::kFrameHeaderBytes, h.length)});
      });
}

std::string takeControlFrames(std::string& buffer, std::vector<ControlFrame>& out) {
  return takeFrames(
      buffer, [](uint16_t type) { return type >= kDirect && type <= kSubtree; },
      [&](const net::FrameHeader& h, size_t at) {
        ControlFrame f;
        f.type = static_cast<ControlFrameType>(h.type);
        size_t body = at + net::kFrameHeaderBytes;
        size_t length = h.length;
        if (h.type == kRouted) {
          net::Reader r(buffer.data() + body, kRankBytes);
          f.rank = static_cast<int>(r.u32());
          body += kRankBytes;
          length -= kRankBytes;
        }
        f.message = buffer.substr(body, length);
        f.wire = buffer.substr(at, net::kFrameHeaderBytes + h.length);
        out.push_back(std::move(f));
      });
}

}  // namespace hora
