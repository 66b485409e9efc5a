// Stores: the shared contract (set/get/add/check/wait, timeouts naming keys) for MemoryStore, the
// TCP store and PrefixStore; then the TCP store's defences (wrong secret, garbage, oversized
// frames) and its behaviour with many clients.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/resource.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/common/errors.h"
#include "core/net/frame.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/store/memory_store.h"
#include "core/store/prefix_store.h"
#include "core/store/tcp_store.h"
#include "core/store/tcp_store_protocol.h"
#include "tests/cpp/peer_closed.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

using namespace std::chrono_literals;

const char kSecret[] = "store-test-secret";

// Builds the store under test; `second()` is another client of the same store.
struct StoreFactory {
  virtual ~StoreFactory() = default;
  virtual Store& store() = 0;
  virtual std::unique_ptr<Store> second() = 0;
};

struct MemoryFactory : StoreFactory {
  MemoryStore s;
  Store& store() override { return s; }
  // Threads share the one in-process object.
  std::unique_ptr<Store> second() override { return nullptr; }
};

struct TcpFactory : StoreFactory {
  TcpStoreServer server{"127.0.0.1", 0, kSecret};
  TcpStoreClient client{"127.0.0.1", server.port(), kSecret, Millis(5000)};
  Store& store() override { return client; }
  std::unique_ptr<Store> second() override {
    return std::make_unique<TcpStoreClient>("127.0.0.1", server.port(), kSecret, Millis(5000));
  }
};

struct PrefixFactory : StoreFactory {
  MemoryStore base;
  PrefixStore s{base, "gen1"};
  Store& store() override { return s; }
  std::unique_ptr<Store> second() override { return std::make_unique<PrefixStore>(base, "gen1"); }
};

class StoreContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "Memory") factory_ = std::make_unique<MemoryFactory>();
    if (GetParam() == "Tcp") factory_ = std::make_unique<TcpFactory>();
    if (GetParam() == "Prefix") factory_ = std::make_unique<PrefixFactory>();
  }
  Store& store() { return factory_->store(); }
  // A second handle on the same data, or null when the store itself is the only handle.
  std::unique_ptr<Store> other() { return factory_->second(); }
  Store& otherOrSame(std::unique_ptr<Store>& holder) {
    holder = other();
    return holder ? *holder : store();
  }
  // A thread that, 50 ms from now, sets "y" to "late" and adds `z` to "z" through another handle
  // (kept in `holder`).
  std::thread setLater(std::unique_ptr<Store>& holder, int64_t z) {
    Store& setter = otherOrSame(holder);
    return std::thread([&setter, z] {
      std::this_thread::sleep_for(50ms);
      setter.set("y", "late");
      setter.add("z", z);
    });
  }

  std::unique_ptr<StoreFactory> factory_;
};

TEST_P(StoreContract, SetGetOverwriteAndBinaryValues) {
  store().set("a", "1");
  EXPECT_EQ(store().get("a", 1000ms), "1");
  store().set("a", "2");
  EXPECT_EQ(store().get("a", 1000ms), "2");
  std::string binary("\0\x01\xff zero", 8);
  store().set("bin", binary);
  EXPECT_EQ(store().get("bin", 1000ms), binary);
  store().set("empty", "");
  EXPECT_EQ(store().get("empty", 1000ms), "");
  std::string big(1 << 20, 'x');
  store().set("big", big);
  EXPECT_EQ(store().get("big", 1000ms), big);
}

TEST_P(StoreContract, AddIsAtomicAcrossClients) {
  EXPECT_EQ(store().add("n", 5), 5);
  EXPECT_EQ(store().add("n", -2), 3);
  EXPECT_EQ(store().get("n", 1000ms), "3");
  test::spawnRanks(8, [&](int rank) {
    std::unique_ptr<Store> mine = rank % 2 ? other() : nullptr;
    Store& s = mine ? *mine : store();
    for (int i = 0; i < 50; ++i) s.add("counter", 1);
  });
  EXPECT_EQ(store().add("counter", 0), 400);
  store().set("text", "abc");
  EXPECT_THROW(store().add("text", 1), InvalidArgument);
}

TEST_P(StoreContract, CheckAndWait) {
  EXPECT_FALSE(store().check({"x"}));
  store().set("x", "1");
  EXPECT_TRUE(store().check({"x"}));
  EXPECT_FALSE(store().check({"x", "y"}));
  EXPECT_TRUE(store().check({}));
  store().wait({}, 0ms);
  std::unique_ptr<Store> holder;
  std::thread t = setLater(holder, 1);
  auto start = std::chrono::steady_clock::now();
  store().wait({"x", "y", "z"}, 5000ms);
  EXPECT_EQ(store().get("y", 0ms), "late");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2000ms);
  t.join();
}

TEST_P(StoreContract, TimeoutsNameTheMissingKeys) {
  store().set("present", "1");
  auto start = std::chrono::steady_clock::now();
  try {
    store().wait({"present", "absent-1", "absent-2"}, 150ms);
    FAIL() << "wait should time out";
  } catch (const TimeoutError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("absent-1"), std::string::npos) << m;
    EXPECT_NE(m.find("absent-2"), std::string::npos) << m;
    EXPECT_EQ(m.find("'present'"), std::string::npos) << m;
  }
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 140ms);
  EXPECT_LT(took, 2000ms);
  EXPECT_THROW(store().get("never", 50ms), TimeoutError);
  // The store still works after timeouts.
  store().set("after", "ok");
  EXPECT_EQ(store().get("after", 100ms), "ok");
}

TEST_P(StoreContract, GetManyReturnsWhatExistsInOrderAndWaitsForTheRest) {
  using Values = std::vector<std::optional<std::string>>;
  store().set("a", "1");
  store().set("empty", "");
  std::string binary("\0\x01\xff", 3);
  store().set("bin", binary);
  // A look (timeout 0): missing keys are nullopt, an empty value is a value.
  EXPECT_EQ(store().getMany({"a", "missing", "empty", "bin", "a"}, 0ms),
            (Values{"1", std::nullopt, "", binary, "1"}));
  EXPECT_EQ(store().getMany({}, 0ms), Values{});
  // A wait returns once the last key arrives, with every value.
  std::unique_ptr<Store> holder;
  std::thread t = setLater(holder, 2);
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(store().getMany({"y", "a", "z"}, 5000ms), (Values{"late", "1", "2"}));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2000ms);
  t.join();
  // At the timeout: what exists, without an error.
  start = std::chrono::steady_clock::now();
  EXPECT_EQ(store().getMany({"a", "never"}, 150ms), (Values{"1", std::nullopt}));
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 140ms);
  EXPECT_LT(took, 2000ms);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreContract, ::testing::Values("Memory", "Tcp", "Prefix"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

TEST(PrefixStore, KeepsGenerationsApart) {
  MemoryStore base;
  PrefixStore a(base, "gen0"), b(base, "gen1");
  a.set("k", "A");
  b.set("k", "B");
  EXPECT_EQ(a.get("k", 0ms), "A");
  EXPECT_EQ(b.get("k", 0ms), "B");
  EXPECT_EQ(base.get("gen0/k", 0ms), "A");
  EXPECT_FALSE(b.check({"only-a"}));
  a.set("only-a", "");
  EXPECT_FALSE(b.check({"only-a"}));
  EXPECT_EQ(a.add("n", 2), 2);
  EXPECT_EQ(b.add("n", 5), 5);
}

// ---- TCP store defences ------------------------------------------------------------------

net::Socket rawConnect(int port) {
  return net::connectWithRetry("127.0.0.1", port, Clock::now() + 2000ms);
}

// True once the server has closed the connection (EOF or reset) within a second.
bool serverClosed(int fd) {
  char buf[256];
  auto deadline = Clock::now() + 2000ms;
  while (net::waitFor(fd, POLLIN, deadline)) {
    net::IoResult r = net::recvSome(fd, buf, sizeof(buf));
    if (r.status == net::IoStatus::Closed || r.status == net::IoStatus::Failed) return true;
  }
  return false;
}

TEST(TcpStore, WrongSecretIsRefused) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  try {
    TcpStoreClient bad("127.0.0.1", server.port(), "not-the-secret", Millis(2000));
    FAIL() << "a client with the wrong secret connected";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("authentication failed"), std::string::npos) << e.what();
  }
  TcpStoreClient good("127.0.0.1", server.port(), kSecret, Millis(2000));
  good.set("k", "v");
  EXPECT_EQ(good.get("k", 100ms), "v");
}

TEST(TcpStore, GarbageBeforeAndAfterAuthenticationDropsOnlyThatConnection) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStoreClient good("127.0.0.1", server.port(), kSecret, Millis(2000));
  good.set("k", "v");

  // Garbage instead of a handshake (e.g. an HTTP probe).
  {
    net::Socket s = rawConnect(server.port());
    std::string junk = "GET / HTTP/1.1\r\nHost: x\r\n\r\n" + std::string(100, 'z');
    net::sendAll(s.fd(), junk.data(), junk.size(), Clock::now() + 1000ms, "test");
    EXPECT_TRUE(serverClosed(s.fd()));
  }
  // A correct handshake followed by a frame with a bad magic.
  {
    net::Socket s = rawConnect(server.port());
    net::Handshake hs = net::Handshake::connector(kSecret, net::PeerKind::Store, -1, -1);
    net::runHandshake(s.fd(), hs, Clock::now() + 2000ms, "test");
    std::string frame = net::buildFrame(0xdeadbeef, 1, "payload");
    net::sendAll(s.fd(), frame.data(), frame.size(), Clock::now() + 1000ms, "test");
    EXPECT_TRUE(serverClosed(s.fd()));
  }
  // A correct handshake followed by an absurd length.
  {
    net::Socket s = rawConnect(server.port());
    net::Handshake hs = net::Handshake::connector(kSecret, net::PeerKind::Store, -1, -1);
    net::runHandshake(s.fd(), hs, Clock::now() + 2000ms, "test");
    net::FrameHeader h;
    h.magic = net::kStoreMagic;
    h.type = 1;
    h.length = 0xfffffff0u;
    uint8_t header[net::kFrameHeaderBytes];
    net::encodeHeader(h, header);
    net::sendAll(s.fd(), header, sizeof(header), Clock::now() + 1000ms, "test");
    EXPECT_TRUE(serverClosed(s.fd()));
  }
  // A silent connection does not block anyone.
  net::Socket silent = rawConnect(server.port());
  // The server kept serving the honest client throughout.
  EXPECT_EQ(good.get("k", 100ms), "v");
  TcpStoreClient late("127.0.0.1", server.port(), kSecret, Millis(2000));
  EXPECT_EQ(late.add("n", 3), 3);
}

// The local address of this process's listening socket on `port` (from /proc/self/net/tcp).
std::string boundAddress(int port) {
  FILE* f = std::fopen("/proc/self/net/tcp", "r");
  if (f == nullptr) return "?";
  char line[512];
  std::string found = "none";
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned slot = 0, ip = 0, p = 0, rip = 0, rport = 0, state = 0;
    if (std::sscanf(line, " %u: %8X:%4X %8X:%4X %2X", &slot, &ip, &p, &rip, &rport, &state) != 6)
      continue;
    if (state != 0x0A || static_cast<int>(p) != port) continue;  // 0x0A = LISTEN
    in_addr addr{};
    addr.s_addr = ip;  // printed as the raw 32-bit word, in network order in memory
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &addr, text, sizeof(text));
    found = text;
  }
  std::fclose(f);
  return found;
}

TEST(TcpStore, ListenerBindsOnlyTheGivenAddress) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  EXPECT_EQ(boundAddress(server.port()), "127.0.0.1");
}

TEST(TcpStore, UnauthenticatedConnectionsAreCapped) {
  // A handshake timeout far beyond the test, so only the cap can close a connection here.
  StoreServerLimits limits{4, Millis(600000)};
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  std::vector<net::Socket> strangers;
  for (int i = 0; i < 4; ++i) strangers.push_back(rawConnect(server.port()));
  // A fifth silent connection evicts the oldest one...
  strangers.push_back(rawConnect(server.port()));
  EXPECT_TRUE(test::peerClosedWithin(strangers[0].fd(), Millis(5000)));
  // ...and an honest client always gets in while strangers hold every slot.
  TcpStoreClient good("127.0.0.1", server.port(), kSecret, Millis(5000));
  good.set("k", "v");
  EXPECT_EQ(good.get("k", 100ms), "v");
  // The honest client evicted exactly one more (the second oldest); the newest three stay.
  EXPECT_TRUE(test::peerClosedWithin(strangers[1].fd(), Millis(5000)));
  for (size_t i = 2; i < strangers.size(); ++i) {
    EXPECT_FALSE(test::peerClosedWithin(strangers[i].fd(), Millis(100))) << "stranger " << i;
  }
}

TEST(TcpStore, UnauthenticatedConnectionsTimeOut) {
  StoreServerLimits limits{net::kMaxPendingHandshakes, Millis(300)};
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  TcpStoreClient good("127.0.0.1", server.port(), kSecret, Millis(5000));
  good.set("k", "v");
  net::Socket silent = rawConnect(server.port());
  // Half a handshake (the connector's first bytes) does not reset the clock either.
  net::Socket slow = rawConnect(server.port());
  std::string partial(3, '\0');
  net::sendAll(slow.fd(), partial.data(), partial.size(), Clock::now() + 1000ms, "test");
  EXPECT_TRUE(test::peerClosedWithin(silent.fd(), Millis(10000)));
  EXPECT_TRUE(test::peerClosedWithin(slow.fd(), Millis(10000)));
  // The authenticated client is not subject to the handshake timeout.
  std::this_thread::sleep_for(limits.handshakeTimeout * 2);
  EXPECT_EQ(good.get("k", 100ms), "v");
}

TEST(TcpStore, DefaultLimitsLetHonestClientsPastManyStrangers) {
  // The numbers docs/security.md gives.
  EXPECT_EQ(net::kMaxPendingHandshakes, 64);
  EXPECT_EQ(net::kHandshakeTimeout, Millis(10000));
  EXPECT_EQ(defaultStoreServerLimits().maxPendingHandshakes, net::kMaxPendingHandshakes);
  EXPECT_EQ(defaultStoreServerLimits().handshakeTimeout, net::kHandshakeTimeout);
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  std::vector<net::Socket> strangers;
  for (int i = 0; i < net::kMaxPendingHandshakes + 16; ++i) {
    strangers.push_back(rawConnect(server.port()));
  }
  TcpStoreClient good("127.0.0.1", server.port(), kSecret, Millis(5000));
  EXPECT_EQ(good.add("n", 2), 2);
  // The oldest strangers were evicted to make room.
  EXPECT_TRUE(test::peerClosedWithin(strangers[0].fd(), Millis(5000)));
}

TEST(ServerBindHost, BindsTheAddressClientsUse) {
  EXPECT_EQ(net::serverBindHost("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(net::serverBindHost("localhost"), "127.0.0.1");
  EXPECT_EQ(net::serverBindHost(""), "");
  EXPECT_EQ(net::serverBindHost("0.0.0.0"), "");
  // TEST-NET-3: never an address of this machine, so the server cannot bind it.
  EXPECT_EQ(net::serverBindHost("203.0.113.9"), "");
  EXPECT_TRUE(net::isLoopbackHost("127.0.0.1") && net::isLoopbackHost("localhost"));
  EXPECT_FALSE(net::isLoopbackHost("10.0.0.1") || net::isLoopbackHost("myhost"));
  // Every non-loopback IPv4 address of this machine binds as itself.
  ifaddrs* list = nullptr;
  ASSERT_EQ(getifaddrs(&list), 0);
  for (ifaddrs* it = list; it != nullptr; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, text, sizeof(text));
    if (net::isLoopbackHost(text)) continue;
    EXPECT_EQ(net::serverBindHost(text), text);
    TcpStoreServer server(net::serverBindHost(text), 0, kSecret);
    EXPECT_EQ(boundAddress(server.port()), std::string(text));
  }
  freeifaddrs(list);
}

TEST(ServerBindHost, APortInUseSaysWhatToDo) {
  int port = 0;
  net::Socket first = net::listenOn("127.0.0.1", 0, &port);
  try {
    net::listenOn("127.0.0.1", port, nullptr);
    FAIL() << "a second listener bound port " << port;
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("Address already in use (another process holds this "
                                         "port, perhaps an earlier job still running: stop it, or "
                                         "choose a free port)"),
              std::string::npos)
        << e.what();
  }
}

TEST(ConnectWithRetry, ANameThatDoesNotResolveIsRetriedUntilTheDeadline) {
  // .invalid never resolves (RFC 2606); a pod's name does once its Service lists it.
  const auto start = Clock::now();
  try {
    net::connectWithRetry("hora-no-such-host.invalid", 9, start + std::chrono::milliseconds(600));
    FAIL() << "connected to a name that does not resolve";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot resolve host 'hora-no-such-host.invalid'"),
              std::string::npos)
        << e.what();
  }
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(150)) << "gave up without retrying";
}

TEST(ServerBindHost, ANameThatDoesNotResolveIsRetriedUntilTheDeadline) {
  const auto start = Clock::now();
  EXPECT_EQ(net::serverBindHost("127.0.0.1", start + std::chrono::milliseconds(600)), "127.0.0.1");
  try {
    net::serverBindHost("hora-no-such-host.invalid", start + std::chrono::milliseconds(600));
    FAIL() << "a name that does not resolve gave a bind address";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot resolve host"), std::string::npos) << e.what();
  }
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(150)) << "gave up without retrying";
}

// After the handshake, frames are plain bytes: neither encrypted nor signed (docs/security.md).
TEST(TcpStore, FramesAfterTheHandshakeArePlainBytes) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  net::Socket s = rawConnect(server.port());
  net::Handshake hs = net::Handshake::connector(kSecret, net::PeerKind::Store, -1, -1);
  net::runHandshake(s.fd(), hs, Clock::now() + 2000ms, "test");
  std::string frame = net::buildFrame(net::kStoreMagic, store_protocol::kSet,
                                      net::Writer().str("plain-key").str("plain-value").take());
  EXPECT_NE(frame.find("plain-value"), std::string::npos);  // the value travels as it is
  net::sendAll(s.fd(), frame.data(), frame.size(), Clock::now() + 1000ms, "test");
  TcpStoreClient reader("127.0.0.1", server.port(), kSecret, Millis(2000));
  EXPECT_EQ(reader.get("plain-key", 2000ms), "plain-value");
}

// Requests queued behind a parked one are all answered once it is released, however many: the
// server works through them in a loop. (Handled by nested calls, 200000 queued requests that are
// each answered at once overflowed the server thread's stack and took the whole store down.)
TEST(TcpStore, ManyRequestsQueuedBehindAParkedOneAreAllAnswered) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  net::Socket s = rawConnect(server.port());
  net::Handshake hs = net::Handshake::connector(kSecret, net::PeerKind::Store, -1, -1);
  net::runHandshake(s.fd(), hs, Clock::now() + 2000ms, "test");
  const int queued = 200000;
  std::string frames = net::buildFrame(net::kStoreMagic, store_protocol::kWait,
                                       net::Writer().u64(20000).u32(1).str("gate").take());
  // A wait for no keys at all: answered as soon as it is handled.
  std::string waitForNothing =
      net::buildFrame(net::kStoreMagic, store_protocol::kWait, net::Writer().u64(0).u32(0).take());
  frames.reserve(frames.size() + queued * waitForNothing.size());
  for (int i = 0; i < queued; ++i) frames += waitForNothing;
  // The server keeps reading while the first request is parked, so this completes.
  net::sendAll(s.fd(), frames.data(), frames.size(), Clock::now() + 20000ms, "test");

  TcpStoreClient other("127.0.0.1", server.port(), kSecret, Millis(2000));
  other.set("gate", "open");
  std::string replies((queued + 1) * net::kFrameHeaderBytes, '\0');
  net::recvAll(s.fd(), &replies[0], replies.size(), Clock::now() + 20000ms, "test");
  for (int i = 0; i <= queued; ++i) {
    net::FrameHeader h = net::decodeHeader(reinterpret_cast<const uint8_t*>(replies.data()) +
                                           i * net::kFrameHeaderBytes);
    ASSERT_EQ(h.type, store_protocol::kOk) << "reply " << i;
    ASSERT_EQ(h.length, 0u) << "reply " << i;
  }
  EXPECT_EQ(other.get("gate", 100ms), "open");
}

// Parked getManys remember how many of their keys, in order, exist: each must still be answered
// when its last missing key arrives, whichever order the keys come in, with every value.
TEST(TcpStore, ParkedGetManysAreAnsweredWithEveryValueInAnyOrderOfArrival) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  const int keys = 200, clients = 8;
  auto key = [](int k) { return "k" + std::to_string(k); };
  std::vector<std::vector<std::optional<std::string>>> got(clients);
  std::vector<std::vector<std::string>> asked(clients);
  std::thread setter([&] {
    TcpStoreClient c("127.0.0.1", server.port(), kSecret, Millis(5000));
    std::this_thread::sleep_for(50ms);  // after the clients have parked, most likely
    for (int i = 0; i < keys; ++i) {
      int k = (i * 37 + 11) % keys;  // 37 is prime to 200: every key once, scrambled
      c.set(key(k), "v" + std::to_string(k));
    }
  });
  test::spawnRanks(clients, [&](int who) {
    for (int i = 0; i < keys; ++i) asked[who].push_back(key((i + who * 25) % keys));
    TcpStoreClient c("127.0.0.1", server.port(), kSecret, Millis(5000));
    got[who] = c.getMany(asked[who], 10000ms);
  });
  setter.join();
  for (int who = 0; who < clients; ++who) {
    ASSERT_EQ(got[who].size(), static_cast<size_t>(keys));
    for (int i = 0; i < keys; ++i) {
      ASSERT_TRUE(got[who][i].has_value()) << "client " << who << ", " << asked[who][i];
      EXPECT_EQ(*got[who][i], "v" + asked[who][i].substr(1));
    }
  }
}

// A client that floods the server behind a parked request is held back by TCP once the server
// has buffered its read-ahead bound (before, the server buffered whatever arrived), and the
// server still answers everyone.
TEST(TcpStore, AFloodBehindAParkedRequestIsHeldBack) {
  StoreServerLimits limits = defaultStoreServerLimits();
  limits.parkedInputBytes = 1u << 20;
  TcpStoreServer server("127.0.0.1", 0, kSecret, limits);
  net::Socket s = rawConnect(server.port());
  net::Handshake hs = net::Handshake::connector(kSecret, net::PeerKind::Store, -1, -1);
  net::runHandshake(s.fd(), hs, Clock::now() + 2000ms, "test");
  std::string park = net::buildFrame(net::kStoreMagic, store_protocol::kWait,
                                     net::Writer().u64(20000).u32(1).str("gate").take());
  net::sendAll(s.fd(), park.data(), park.size(), Clock::now() + 1000ms, "test");
  std::string set = net::buildFrame(net::kStoreMagic, store_protocol::kSet,
                                    net::Writer().str("k").str(std::string(64u << 10, 'x')).take());
  // 64 MiB: far more than the bound plus both kernels' socket buffers.
  size_t sent = 0;
  try {
    for (int i = 0; i < 1024; ++i) {
      net::sendAll(s.fd(), set.data(), set.size(), Clock::now() + 1000ms, "test");
      sent += set.size();
    }
  } catch (const std::exception&) {
    // held back: the send timed out
  }
  EXPECT_LT(sent, size_t{32} << 20);
  TcpStoreClient other("127.0.0.1", server.port(), kSecret, Millis(2000));
  other.set("gate", "open");
  EXPECT_EQ(other.get("gate", 1000ms), "open");
}

// Peak resident memory of this process, in bytes.
long peakResidentBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss * 1024L;
}

// A reply whose header announces far more than arrives costs the client only what arrives: it
// fails with IoError when the server hangs up, without having allocated the announced 64 MiB.
// (Found by fuzz_store_client under a 16 MiB allocation limit.)
TEST(TcpStore, AnAnnouncedReplyLengthIsNotAllocatedBeforeItsBytesArrive) {
  int port = 0;
  net::Socket listener = net::listenOn("127.0.0.1", 0, &port);
  std::thread fakeServer([&] {
    auto deadline = Clock::now() + 5000ms;
    if (!net::waitFor(listener.fd(), POLLIN, deadline)) return;
    net::Socket conn = net::acceptPending(listener.fd(), nullptr);
    try {
      net::Handshake hs = net::Handshake::acceptor(kSecret, -1, nullptr);
      net::runHandshake(conn.fd(), hs, deadline, "fake store");
      uint8_t header[net::kFrameHeaderBytes];
      net::recvAll(conn.fd(), header, sizeof(header), deadline, "fake store");
      std::string request(net::decodeHeader(header).length, '\0');
      net::recvAll(conn.fd(), &request[0], request.size(), deadline, "fake store");
      net::FrameHeader reply;
      reply.magic = net::kStoreMagic;
      reply.type = store_protocol::kValue;
      reply.length = store_protocol::kMaxFrameBytes;
      net::encodeHeader(reply, header);
      net::sendAll(conn.fd(), header, sizeof(header), deadline, "fake store");
    } catch (const Error&) {
      // Whatever failed here, the client's checks below report it.
    }
  });  // hangs up after the header
  TcpStoreClient client("127.0.0.1", port, kSecret, Millis(5000));
  long before = peakResidentBytes();
  EXPECT_THROW(client.get("k", 0ms), IoError);
  fakeServer.join();
  EXPECT_LT(peakResidentBytes() - before, long(store_protocol::kMaxFrameBytes / 2));
}

TEST(TcpStore, ParkedWaitsDoNotBlockOtherClientsOrThreads) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStoreClient shared("127.0.0.1", server.port(), kSecret, Millis(2000));
  // 16 threads wait on one client object while another thread sets the keys through it.
  std::atomic<int> released{0};
  std::vector<std::thread> waiters;
  for (int i = 0; i < 16; ++i) {
    waiters.emplace_back([&, i] {
      shared.wait({"go", "key" + std::to_string(i)}, 5000ms);
      released++;
    });
  }
  std::this_thread::sleep_for(50ms);
  for (int i = 0; i < 16; ++i) shared.set("key" + std::to_string(i), "x");
  EXPECT_EQ(released.load(), 0);
  shared.set("go", "1");
  for (auto& t : waiters) t.join();
  EXPECT_EQ(released.load(), 16);
}

TEST(TcpStore, ClientRetriesUntilServerIsUpAndFailsWhenNeverUp) {
  int port = 0;
  { net::listenOn("127.0.0.1", 0, &port); }  // a port that is free again
  auto start = Clock::now();
  EXPECT_THROW(TcpStoreClient("127.0.0.1", port, kSecret, Millis(200)), IoError);
  EXPECT_LT(Clock::now() - start, 2000ms);
}

TEST(TcpStore, StopIsIdempotentAndClientsSeeIoError) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0, kSecret);
  TcpStoreClient client("127.0.0.1", server->port(), kSecret, Millis(300));
  client.set("k", "v");
  server->stop();
  server->stop();
  EXPECT_THROW(client.get("k", 100ms), IoError);
}

}  // namespace
}  // namespace hora
