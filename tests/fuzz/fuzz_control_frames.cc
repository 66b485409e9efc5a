// libFuzzer target: the TCP control channel's frame reader, fed through a real socket pair the way
// rank 0 reads a peer (partial frames buffered across reads, header checked before the payload),
// and every message it delivers handed to both negotiation decoders. The channel must deliver
// whole frames or fail with IoError naming the peer; once the peer hangs up it must report that
// within a bounded number of polls. The same bytes then reach a relay of the control tree from its
// parent (rank 1 of the chain 0 - 1 - 2 - 3): what it delivers comes from rank 0, and what it
// passes on to its child is whole, valid frames meant for the ranks below it only.
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/common/errors.h"
#include "core/coordinator/codec.h"
#include "core/net/socket.h"
#include "core/transport/control_frames.h"
#include "core/transport/tcp/control_channel.h"

namespace {

void decodeBoth(const std::string& bytes) {
  try {
    hora::decodeRequestBatch(bytes);
  } catch (const hora::IoError&) {}
  try {
    hora::decodeResponseBatch(bytes);
  } catch (const hora::IoError&) {}
}

std::pair<hora::net::Socket, hora::net::Socket> socketPair() {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) std::abort();
  hora::net::setNonBlocking(sv[0]);
  hora::net::setNonBlocking(sv[1]);
  return {hora::net::Socket(sv[0]), hora::net::Socket(sv[1])};
}

// Writes `data` into `writer` while polling `channel` (so inputs larger than the socket buffer
// still go through), then hangs up and polls until the channel reports it; `drain` runs after
// every poll. Returns what the channel delivered.
std::vector<hora::ControlChannel::Message> feed(hora::tcp::TcpControlChannel& channel,
                                                const hora::net::Socket& writer,
                                                const uint8_t* data, size_t size,
                                                const std::function<void()>& drain) {
  std::vector<hora::ControlChannel::Message> out;
  bool failed = false;
  size_t sent = 0;
  while (sent < size && !failed) {
    hora::net::IoResult r = hora::net::sendSome(writer.fd(), data + sent, size - sent);
    if (r.status == hora::net::IoStatus::Ok) sent += r.bytes;
    try {
      channel.poll(out, hora::Millis(0));
    } catch (const hora::IoError&) {
      failed = true;
    }
    drain();
  }
  ::shutdown(writer.fd(), SHUT_WR);
  for (int i = 0; i < 100 && !failed; ++i) {
    try {
      channel.poll(out, hora::Millis(100));
    } catch (const hora::IoError&) {
      failed = true;
    }
    drain();
  }
  if (!failed) {
    std::fprintf(stderr, "control channel did not report the closed connection\n");
    std::abort();
  }
  return out;
}

// Rank 0 reading its child, rank 1 of two.
void root(const uint8_t* data, size_t size) {
  auto pair = socketPair();
  std::vector<hora::net::Socket> sockets(2);
  sockets[1] = std::move(pair.first);
  hora::tcp::TcpControlChannel channel(0, 2, std::move(sockets), hora::Millis(1000));
  for (const auto& m : feed(channel, pair.second, data, size, [] {})) {
    if (m.from != 1) std::abort();
    decodeBoth(m.bytes);
  }
}

// Rank 1 of the chain 0 - 1 - 2 - 3 reading its parent. A thread reads what it passes on to its
// child as it comes: a relay's poll returns only once that is written.
void relay(const uint8_t* data, size_t size) {
  auto parent = socketPair();
  auto child = socketPair();
  std::vector<hora::net::Socket> sockets(4);
  sockets[0] = std::move(parent.first);
  sockets[2] = std::move(child.first);
  auto channel = std::make_unique<hora::tcp::TcpControlChannel>(1, 4, std::move(sockets),
                                                                hora::Millis(1000), 1);
  std::string passedOn;
  std::thread reader([&] {
    char buf[65536];
    for (;;) {
      hora::net::IoResult r = hora::net::recvSome(child.second.fd(), buf, sizeof(buf));
      if (r.status == hora::net::IoStatus::Ok) {
        passedOn.append(buf, r.bytes);
      } else if (r.status == hora::net::IoStatus::WouldBlock) {
        pollfd fd{child.second.fd(), POLLIN, 0};
        ::poll(&fd, 1, 100);
      } else {
        return;  // the relay closed its end
      }
    }
  });
  for (const auto& m : feed(*channel, parent.second, data, size, [] {})) {
    if (m.from != 0) std::abort();
  }
  channel.reset();
  reader.join();
  std::vector<hora::ControlFrame> frames;
  if (!hora::takeControlFrames(passedOn, frames).empty() || !passedOn.empty()) {
    std::fprintf(stderr, "the relay passed on a bad or partial frame\n");
    std::abort();
  }
  for (const auto& f : frames) {
    bool below = f.type == hora::ControlFrameType::Subtree ||
                 (f.type == hora::ControlFrameType::Routed && (f.rank == 2 || f.rank == 3));
    if (!below) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  root(data, size);
  relay(data, size);
  return 0;
}
