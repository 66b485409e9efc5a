// libFuzzer target: the TCP store client's reply reader. For each input this harness plays the
// store server on loopback: it accepts the client, passes the handshake, reads one request and
// answers it with the input's bytes, then hangs up. The client (one call, chosen by the first
// byte) must return a value or throw one of Hora's typed errors, and must not wait for bytes a
// reply announced but the server never sent.
#include <sys/socket.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/common/errors.h"
#include "core/common/time.h"
#include "core/net/frame.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/store/tcp_store.h"

namespace {

namespace net = hora::net;

const std::string kSecret = "fuzz-secret";

net::Socket& listener(int* port) {
  static int boundPort = 0;
  static auto* s = new net::Socket(net::listenOn("127.0.0.1", 0, &boundPort));
  *port = boundPort;
  return *s;
}

// The fake server's side of one connection; any failure just ends it (the client then sees EOF).
void serveOnce(int listenFd, const uint8_t* reply, size_t size) {
  auto deadline = hora::Clock::now() + hora::Millis(5000);
  if (!net::waitFor(listenFd, POLLIN, deadline)) return;
  net::Socket conn = net::acceptPending(listenFd, nullptr);
  if (!conn.valid()) return;
  try {
    net::Handshake hs = net::Handshake::acceptor(kSecret, -1, nullptr);
    net::runHandshake(conn.fd(), hs, deadline, "fuzz store server");
    uint8_t header[net::kFrameHeaderBytes];
    net::recvAll(conn.fd(), header, sizeof(header), deadline, "fuzz store server");
    std::string payload(net::decodeHeader(header).length, '\0');
    if (!payload.empty()) net::recvAll(conn.fd(), &payload[0], payload.size(), deadline, "request");
    net::sendAll(conn.fd(), reply, size, deadline, "fuzz store server");
    // EOF right after the reply, so a client expecting more sees at once that nothing follows;
    // then wait for the client to close first (loopback reuses its TIME_WAIT ports).
    ::shutdown(conn.fd(), SHUT_WR);
    char sink[256];
    while (net::waitFor(conn.fd(), POLLIN, deadline)) {
      if (net::recvSome(conn.fd(), sink, sizeof(sink)).status != net::IoStatus::Ok) break;
    }
  } catch (const hora::Error&) {}
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  int port = 0;
  int listenFd = listener(&port).fd();
  uint8_t op = data[0];
  std::thread server(serveOnce, listenFd, data + 1, size - 1);
  try {
    hora::TcpStoreClient client("127.0.0.1", port, kSecret, hora::Millis(5000));
    switch (op % 6) {
      case 0: client.set("k", "v"); break;
      case 1: client.get("k", hora::Millis(0)); break;
      case 2: client.add("k", 1); break;
      case 3: client.check({"k", "l"}); break;
      case 4: client.wait({"k"}, hora::Millis(0)); break;
      default: client.getMany({"k", "l"}, hora::Millis(0)); break;
    }
  } catch (const hora::Error&) {}
  server.join();
  return 0;
}
