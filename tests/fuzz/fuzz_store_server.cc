// libFuzzer target: the TCP store server's request reader, end to end. One server runs for the
// whole fuzzing session on loopback; each input opens a connection, passes the handshake (the
// harness knows the secret, as an authenticated rank would), sends the input as the request
// stream and hangs up. The server must answer only with well-formed reply frames and must close
// the connection once the client has hung up (a parked request or a half-read frame must not keep
// it open), whatever the input was. A crash or hang of the server thread fails the run.
#include <sys/socket.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/common/errors.h"
#include "core/common/time.h"
#include "core/net/frame.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/store/tcp_store.h"
#include "core/store/tcp_store_protocol.h"

namespace {

namespace net = hora::net;
namespace proto = hora::store_protocol;

const std::string kSecret = "fuzz-secret";

[[noreturn]] void fail(const std::string& why) {
  std::fprintf(stderr, "fuzz_store_server: %s\n", why.c_str());
  std::abort();
}

hora::TcpStoreServer& server() {
  static auto* s = new hora::TcpStoreServer("127.0.0.1", 0, kSecret);  // lives for the session
  return *s;
}

// Every reply the server sent must be one of its reply types inside a valid store frame.
void checkReplies(const std::string& bytes) {
  size_t at = 0;
  while (at < bytes.size()) {
    if (bytes.size() - at < net::kFrameHeaderBytes) fail("truncated reply header");
    net::FrameHeader h = net::decodeHeader(reinterpret_cast<const uint8_t*>(bytes.data() + at));
    std::string bad = net::validateHeader(h, net::kStoreMagic, proto::kMaxFrameBytes);
    if (!bad.empty()) fail("malformed reply: " + bad);
    if (!proto::isReplyType(h.type)) fail("unknown reply type");
    if (bytes.size() - at - net::kFrameHeaderBytes < h.length) fail("truncated reply payload");
    at += net::kFrameHeaderBytes + h.length;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto deadline = hora::Clock::now() + hora::Millis(10000);
  net::Socket sock = net::connectWithRetry("127.0.0.1", server().port(), deadline);
  // Reset instead of TIME_WAIT on close: a session opens one connection per input.
  linger noWait{1, 0};
  setsockopt(sock.fd(), SOL_SOCKET, SO_LINGER, &noWait, sizeof(noWait));
  net::Handshake hs = net::Handshake::connector(kSecret, net::PeerKind::Store, -1, -1);
  net::runHandshake(sock.fd(), hs, deadline, "fuzz store client");

  std::string replies;
  char buf[64 * 1024];
  size_t sent = 0;
  bool closed = false;
  // Reads while writing: a server whose replies are not read would stop reading requests.
  while (!closed) {
    if (sent < size) {
      net::IoResult w = net::sendSome(sock.fd(), data + sent, size - sent);
      if (w.status == net::IoStatus::Ok) {
        sent += w.bytes;
        if (sent == size) ::shutdown(sock.fd(), SHUT_WR);
      } else if (w.status != net::IoStatus::WouldBlock) {
        sent = size;  // the server dropped us mid-stream: fine, it saw garbage
      }
    } else if (size == 0) {
      ::shutdown(sock.fd(), SHUT_WR);
    }
    net::IoResult r = net::recvSome(sock.fd(), buf, sizeof(buf));
    if (r.status == net::IoStatus::Ok) {
      replies.append(buf, r.bytes);
    } else if (r.status == net::IoStatus::WouldBlock) {
      short events = sent < size ? (POLLIN | POLLOUT) : POLLIN;
      if (!net::waitFor(sock.fd(), events, deadline)) fail("the server kept the connection open");
    } else {
      closed = true;
    }
  }
  checkReplies(replies);
  return 0;
}
