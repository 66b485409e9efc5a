#pragma once
// The control plane's wire, whatever carries it (tcp/control_channel.h, shm/control_channel.h):
// one frame per message (net::kControlMagic, type 1, the message as payload; core/net/frame.h).
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
// is bad (the frames before it are delivered), or "" when there is none.
std::string takeControlMessages(int from, std::string& buffer,
                                std::vector<ControlChannel::Message>& out);

}  // namespace hora
