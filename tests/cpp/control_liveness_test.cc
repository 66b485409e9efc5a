// The TCP control channel sizes TCP keepalive from the op timeout (at most kUnreachableAfter), so
// that an idle connection to a crashed host or across a cut network fails within about that
// time; data sockets get keepalive of their own (net::setKeepalive).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <string>
#include <vector>

#include "core/net/socket.h"
#include "core/transport/tcp/control_channel.h"

namespace hora {
namespace {

int intOption(int fd, int level, int name) {
  int value = -1;
  socklen_t len = sizeof(value);
  EXPECT_EQ(getsockopt(fd, level, name, &value, &len), 0);
  return value;
}

struct LoopbackPair {
  net::Socket client, server;
};

LoopbackPair connectedPair() {
  int port = 0;
  net::Socket listener = net::listenOn("127.0.0.1", 0, &port);
  LoopbackPair p;
  p.client = net::connectWithRetry("127.0.0.1", port, Clock::now() + std::chrono::seconds(10));
  EXPECT_TRUE(net::waitFor(listener.fd(), POLLIN, Clock::now() + std::chrono::seconds(10)));
  p.server = net::acceptPending(listener.fd(), nullptr);
  return p;
}

TEST(ControlLiveness, KeepaliveIsSizedFromTheTimeout) {
  LoopbackPair p = connectedPair();
  int fd = p.client.fd();
  tcp::setLivenessTimeout(fd, Millis(60000));
  EXPECT_EQ(intOption(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
  int idle = intOption(fd, IPPROTO_TCP, TCP_KEEPIDLE);
  int interval = intOption(fd, IPPROTO_TCP, TCP_KEEPINTVL);
  int count = intOption(fd, IPPROTO_TCP, TCP_KEEPCNT);
  // A silent peer is noticed within the timeout, not the kernel's two hours.
  EXPECT_GT(idle, 0);
  EXPECT_LE(idle + interval * count, 60);
  EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 60000);
}

TEST(ControlLiveness, TheChannelAppliesItToEveryConnection) {
  LoopbackPair p = connectedPair();
  int fd = p.server.fd();
  std::vector<net::Socket> sockets(2);
  sockets[1] = std::move(p.server);  // rank 0's connection to rank 1
  tcp::TcpControlChannel channel(0, 2, std::move(sockets), Millis(8000));
  int idle = intOption(fd, IPPROTO_TCP, TCP_KEEPIDLE);
  int interval = intOption(fd, IPPROTO_TCP, TCP_KEEPINTVL);
  int count = intOption(fd, IPPROTO_TCP, TCP_KEEPCNT);
  EXPECT_LE(idle + interval * count, 8);
  EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 8000);
}

// A long op timeout does not stretch the time an unreachable host takes to notice: the channel
// caps keepalive and the user timeout at kUnreachableAfter.
TEST(ControlLiveness, AnUnreachableHostIsNoticedWithinTheBoundWhateverTheTimeout) {
  LoopbackPair p = connectedPair();
  int fd = p.server.fd();
  std::vector<net::Socket> sockets(2);
  sockets[1] = std::move(p.server);
  tcp::TcpControlChannel channel(0, 2, std::move(sockets), Millis(600000));
  int idle = intOption(fd, IPPROTO_TCP, TCP_KEEPIDLE);
  int interval = intOption(fd, IPPROTO_TCP, TCP_KEEPINTVL);
  int count = intOption(fd, IPPROTO_TCP, TCP_KEEPCNT);
  EXPECT_LE(idle + interval * count, tcp::kUnreachableAfter.count() / 1000);
  EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), tcp::kUnreachableAfter.count());
}

// A rank of the control tree holds connections to a few ranks only; an unreachable host is named
// with every rank the job runs there.
TEST(ControlLiveness, AnUnreachableHostIsNamedWithAllItsRanks) {
  std::vector<std::string> hosts = {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.2", "10.0.0.2"};
  std::string text = tcp::unreachableHostText(3, "10.0.0.2", hosts, Millis(8000));
  EXPECT_NE(text.find("the host of rank 3 (10.0.0.2) is unreachable: no answer for 8 s"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("; ranks 1, 3, 4 run there"), std::string::npos) << text;
}

TEST(ControlLiveness, KeepaliveForDataSocketsProbesAsAsked) {
  LoopbackPair p = connectedPair();
  int fd = p.client.fd();
  net::setKeepalive(fd, Millis(3000), Millis(1000), 5);
  EXPECT_EQ(intOption(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
  EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_KEEPIDLE), 3);
  EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_KEEPINTVL), 1);
  EXPECT_EQ(intOption(fd, IPPROTO_TCP, TCP_KEEPCNT), 5);
  EXPECT_EQ(net::peerAddress(fd), "127.0.0.1");
  EXPECT_EQ(net::peerAddress(p.server.fd()), "127.0.0.1");
}

// A local socket pair has no keepalive to set: the channel takes it as it is (the control-frame
// fuzz target and tests run the channel over socket pairs).
TEST(ControlLiveness, ALocalSocketPairIsLeftAsItIs) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  net::Socket a(fds[0]), b(fds[1]);
  EXPECT_NO_THROW(tcp::setLivenessTimeout(a.fd(), Millis(8000)));
  EXPECT_NO_THROW(net::setKeepalive(a.fd(), Millis(3000), Millis(1000), 5));
  EXPECT_EQ(net::peerAddress(a.fd()), "");
  std::vector<net::Socket> sockets(2);
  sockets[1] = std::move(b);
  EXPECT_NO_THROW(tcp::TcpControlChannel(0, 2, std::move(sockets), Millis(8000)));
}

}  // namespace
}  // namespace hora
