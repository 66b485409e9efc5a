#pragma once
// The control plane's wire, whatever carries it (tcp/control_channel.h, shm/control_channel.h):
// one frame per message (net::kControlMagic, type 1, the message as payload; core/net/frame.h).
//
// The TCP control tree (tcp/control_tree.h) adds two frame types for messages a rank relays,
// used only on links where the message's origin or destination is not the rank at the other end
// (a star, where every message crosses one link, never sends them):
// - Routed (type 2): a u32 rank, then the message. Going up, the rank is the message's origin;
//   going down, its destination.
// - Subtree (type 3): the message, sent down by rank 0 for every rank of the receiver's subtree.
#include <cstdint>
#include <string>
#include <vector>

#include "core/transport/control_channel.h"

namespace hora {

// Largest control message: a bigger announced length means a corrupt stream, not a message.
constexpr uint32_t kMaxControlMessageBytes = 256u << 20;

// The frame that carries one control message (at most kMaxControlMessageBytes).
std::string controlFrame(const std::string& message);

// Moves every whole frame at the front of `buffer` (bytes received from rank `from`) to `out`,
// leaving a trailing partial frame in place. Each header is checked before its payload arrives,
// so a corrupt length never makes the reader buffer up to it. Returns why the first bad header
// is bad (the frames before it are delivered), or "" when there is none. Only type 1 is accepted.
std::string takeControlMessages(int from, std::string& buffer,
                                std::vector<ControlChannel::Message>& out);

enum class ControlFrameType : uint16_t { Direct = 1, Routed = 2, Subtree = 3 };

struct ControlFrame {
  ControlFrameType type = ControlFrameType::Direct;
  int rank = -1;  // Routed: the origin (going up) or the destination (going down)
  std::string message;
  std::string wire;  // the whole frame as received, for a relay to pass on unchanged
};

std::string routedControlFrame(int rank, const std::string& message);
std::string subtreeControlFrame(const std::string& message);

// As takeControlMessages, for every frame type: the tree's links carry all three.
std::string takeControlFrames(std::string& buffer, std::vector<ControlFrame>& out);

}  // namespace hora
