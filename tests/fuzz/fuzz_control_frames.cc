// libFuzzer target: the TCP control channel's frame reader, fed through a real socket pair the way
// rank 0 reads a peer (partial frames buffered across reads, header checked before the payload),
// and every message it delivers handed to both negotiation decoders. The channel must deliver
// whole frames or fail with IoError naming the peer; once the peer hangs up it must report that
// within a bounded number of polls.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/common/errors.h"
#include "core/coordinator/codec.h"
#include "core/net/socket.h"
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

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) std::abort();
  hora::net::setNonBlocking(sv[0]);
  hora::net::setNonBlocking(sv[1]);
  hora::net::Socket writer(sv[1]);
  std::vector<hora::net::Socket> sockets;
  sockets.emplace_back();  // rank 0: this process
  sockets.emplace_back(sv[0]);
  hora::tcp::TcpControlChannel channel(0, 2, std::move(sockets), hora::Millis(1000));

  std::vector<hora::ControlChannel::Message> out;
  bool failed = false;
  size_t sent = 0;
  // Interleaves writing and reading so inputs larger than the socket buffer still go through.
  while (sent < size && !failed) {
    hora::net::IoResult r = hora::net::sendSome(writer.fd(), data + sent, size - sent);
    if (r.status == hora::net::IoStatus::Ok) sent += r.bytes;
    try {
      channel.poll(out, hora::Millis(0));
    } catch (const hora::IoError&) {
      failed = true;
    }
  }
  ::shutdown(writer.fd(), SHUT_WR);
  for (int i = 0; i < 100 && !failed; ++i) {
    try {
      channel.poll(out, hora::Millis(100));
    } catch (const hora::IoError&) {
      failed = true;
    }
  }
  if (!failed) {
    std::fprintf(stderr, "control channel did not report the closed connection\n");
    std::abort();
  }
  for (const auto& m : out) {
    if (m.from != 1) std::abort();
    decodeBoth(m.bytes);
  }
  return 0;
}
