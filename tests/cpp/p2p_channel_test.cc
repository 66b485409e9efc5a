// The point-to-point channel end to end: N ranks as threads of this process over 127.0.0.1 with a
// job secret, each with its own Channel, exchanging tagged messages; then the failure cases (a
// closed peer, strangers, malformed bytes, timeouts, close()).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/common/errors.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/p2p/channel.h"
#include "core/p2p/message_header.h"
#include "tests/cpp/peer_closed.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace p2p {
namespace {

using namespace std::chrono_literals;

const char kSecret[] = "p2p-test-secret";
constexpr Millis kLong{20000};  // generous: only a hang reaches it

// n channels on 127.0.0.1 that know each other's addresses.
std::vector<std::unique_ptr<Channel>> makeJob(int n) {
  std::vector<std::unique_ptr<Channel>> job;
  std::vector<std::string> addresses;
  for (int rank = 0; rank < n; ++rank) {
    job.push_back(std::make_unique<Channel>(rank, n, kSecret, "127.0.0.1"));
    addresses.push_back(job.back()->address());
  }
  for (auto& c : job) c->setPeers(addresses);
  return job;
}

std::string pattern(size_t bytes, int seed) {
  std::string s(bytes, '\0');
  uint32_t x = 2654435761u * static_cast<uint32_t>(seed + 1);
  for (size_t i = 0; i < bytes; ++i) {
    x = x * 1664525u + 1013904223u;
    s[i] = static_cast<char>(x >> 24);
  }
  return s;
}

void sendText(Channel& c, const std::string& text, int dst, int64_t tag) {
  c.send(text.data(), text.size(), dst, tag, kLong);
}

std::string recvText(Channel& c, size_t bytes, int src, int64_t tag, int* from = nullptr,
                     Millis timeout = kLong) {
  std::string out(bytes, '\0');
  int got = c.recv(&out[0], bytes, src, tag, timeout);
  if (from != nullptr) *from = got;
  return out;
}

// Connects to a channel's port as `rank` would and passes the handshake with `secret`.
net::Socket connectAs(const Channel& c, int rank, const std::string& secret) {
  std::string host;
  int port = 0;
  net::parseHostPort(c.address(), &host, &port);
  auto deadline = Clock::now() + 5000ms;
  net::Socket s = net::connectWithRetry(host, port, deadline);
  net::Handshake hs = net::Handshake::connector(secret, net::PeerKind::P2p, rank, c.rank());
  net::runHandshake(s.fd(), hs, deadline, "test peer");
  return s;
}

TEST(PointToPoint, PingPongBetweenTwoRanks) {
  auto job = makeJob(2);
  test::spawnRanks(2, [&](int rank) {
    Channel& c = *job[rank];
    for (int i = 0; i < 50; ++i) {
      std::string ball = "ball " + std::to_string(i);
      if (rank == 0) {
        sendText(c, ball, 1, 7);
        EXPECT_EQ(recvText(c, ball.size(), 1, 7), ball);
      } else {
        std::string got = recvText(c, ball.size(), 0, 7);
        EXPECT_EQ(got, ball);
        sendText(c, got, 0, 7);
      }
    }
  });
}

TEST(PointToPoint, TagsAreMatchedWhateverOrderTheMessagesArriveIn) {
  auto job = makeJob(2);
  std::atomic<bool> tagTwoPosted{false};
  std::string two;
  std::thread waiter([&] {
    tagTwoPosted = true;
    two = recvText(*job[1], 3, 0, 2);
  });
  while (!tagTwoPosted) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);  // the tag-2 receive is posted before anything is sent
  sendText(*job[0], "one", 1, 1);
  sendText(*job[0], "two", 1, 2);
  waiter.join();
  EXPECT_EQ(two, "two");
  EXPECT_EQ(recvText(*job[1], 3, 0, 1), "one");
}

TEST(PointToPoint, ManyMessagesWithOneTagArriveInSendingOrder) {
  auto job = makeJob(2);
  const int count = 2000;
  std::thread sender([&] {
    for (int i = 0; i < count; ++i) {
      uint32_t v = static_cast<uint32_t>(i);
      job[0]->send(&v, sizeof(v), 1, 3, kLong);
    }
  });
  for (int i = 0; i < count; ++i) {
    uint32_t v = 0;
    job[1]->recv(&v, sizeof(v), 0, 3, kLong);
    ASSERT_EQ(v, static_cast<uint32_t>(i));
  }
  sender.join();
}

TEST(PointToPoint, RecvFromAnySourceGetsEverySendersMessages) {
  const int n = 4;
  const int each = 100;
  auto job = makeJob(n);
  std::vector<int> next(n, 0);
  test::spawnRanks(n, [&](int rank) {
    if (rank != 0) {
      for (int i = 0; i < each; ++i) {
        int32_t v = rank * 1000 + i;
        job[rank]->send(&v, sizeof(v), 0, 11, kLong);
      }
      return;
    }
    for (int i = 0; i < (n - 1) * each; ++i) {
      int32_t v = 0;
      int from = job[0]->recv(&v, sizeof(v), kAnySource, 11, kLong);
      ASSERT_EQ(v / 1000, from);
      ASSERT_EQ(v % 1000, next[from]) << "messages from rank " << from << " overtook each other";
      ++next[from];
    }
  });
  for (int r = 1; r < n; ++r) EXPECT_EQ(next[r], each);
}

TEST(PointToPoint, AMessageMayArriveBeforeOrAfterItsRecvIsPosted) {
  auto job = makeJob(2);
  // Before: sent and given time to arrive, then received.
  sendText(*job[0], "before", 1, 1);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(recvText(*job[1], 6, 0, 1), "before");
  // After: the receive waits, then the message comes.
  std::thread late([&] {
    std::this_thread::sleep_for(50ms);
    sendText(*job[0], "after!", 1, 1);
  });
  EXPECT_EQ(recvText(*job[1], 6, 0, 1), "after!");
  late.join();
}

TEST(PointToPoint, SizesZeroOneOddAndSixtyFourMiBArriveIntact) {
  auto job = makeJob(2);
  const std::vector<size_t> sizes = {0, 1, 1001, 64u << 20};
  std::thread sender([&] {
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::string data = pattern(sizes[i], static_cast<int>(i));
      job[0]->send(data.data(), data.size(), 1, static_cast<int64_t>(i), kLong);
    }
  });
  // Received in reverse: the big message arrives unexpected and is kept until asked for, and
  // the zero-byte one is matched last.
  for (size_t k = sizes.size(); k-- > 0;) {
    std::string got = recvText(*job[1], sizes[k], 0, static_cast<int64_t>(k));
    EXPECT_TRUE(got == pattern(sizes[k], static_cast<int>(k))) << "size " << sizes[k];
  }
  sender.join();
  // And the other way, with the receive posted first.
  std::string big = pattern(64u << 20, 9);
  std::thread receiver([&] {
    std::string got = recvText(*job[0], big.size(), 1, 5);
    EXPECT_TRUE(got == big);
  });
  std::this_thread::sleep_for(20ms);
  job[1]->send(big.data(), big.size(), 0, 5, kLong);
  receiver.join();
}

TEST(PointToPoint, ASizeMismatchFailsTheRecvNamingBothSizesPeerAndTag) {
  auto job = makeJob(2);
  sendText(*job[0], "twelve bytes", 1, 4);
  try {
    recvText(*job[1], 5, 0, 4);
    FAIL() << "a recv of the wrong size passed";
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("12 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("5 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 0 with tag 4"), std::string::npos) << what;
  }
  // Consumed: the next message with that tag is the next one received.
  sendText(*job[0], "next", 1, 4);
  EXPECT_EQ(recvText(*job[1], 4, 0, 4), "next");
}

TEST(PointToPoint, ARecvTimeoutNamesPeerAndTagAndTheChannelGoesOn) {
  auto job = makeJob(2);
  auto start = std::chrono::steady_clock::now();
  try {
    recvText(*job[1], 4, 0, 42, nullptr, 200ms);
    FAIL() << "the recv did not time out";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("rank 0 with tag 42"), std::string::npos) << what;
  }
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 190ms);
  EXPECT_LT(took, 5000ms);
  try {
    recvText(*job[1], 4, kAnySource, 43, nullptr, 50ms);
    FAIL() << "the recv from any rank did not time out";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("any rank with tag 43"), std::string::npos) << e.what();
  }
  sendText(*job[0], "late", 1, 42);
  EXPECT_EQ(recvText(*job[1], 4, 0, 42), "late");
}

TEST(PointToPoint, ARecvFromAPeerThatClosesFailsPromptlyNotAtItsTimeout) {
  auto job = makeJob(3);
  sendText(*job[1], "hi", 0, 1);  // both directions connected
  EXPECT_EQ(recvText(*job[0], 2, 1, 1), "hi");
  sendText(*job[0], "ho", 1, 1);
  EXPECT_EQ(recvText(*job[1], 2, 0, 1), "ho");
  sendText(*job[1], "left", 0, 2);  // arrives before the close: still receivable
  std::thread closer([&] {
    std::this_thread::sleep_for(100ms);
    job[1]->close();
  });
  auto start = std::chrono::steady_clock::now();
  try {
    recvText(*job[0], 4, 1, 3, nullptr, Millis(60000));
    FAIL() << "the recv from a closed peer passed";
  } catch (const IoError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("rank 1 closed its point-to-point connection"), std::string::npos) << what;
    EXPECT_NE(what.find("tag 3"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5000ms);
  closer.join();
  EXPECT_EQ(recvText(*job[0], 4, 1, 2), "left");
  EXPECT_THROW(recvText(*job[0], 4, 1, 2), IoError);  // nothing more can come from rank 1
  // A recv from any rank waits on: rank 2 is still there.
  std::thread two([&] { sendText(*job[2], "two", 0, 9); });
  int from = -1;
  EXPECT_EQ(recvText(*job[0], 3, kAnySource, 9, &from), "two");
  EXPECT_EQ(from, 2);
  two.join();
  // Sends to the closed rank fail.
  EXPECT_THROW(sendText(*job[0], "x", 1, 1), IoError);
}

TEST(PointToPoint, AStrangerWithTheWrongSecretIsRefusedAndTheChannelGoesOn) {
  auto job = makeJob(2);
  try {
    connectAs(*job[1], 0, "not-the-secret");
    FAIL() << "a stranger passed the handshake";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("authentication failed"), std::string::npos) << e.what();
  }
  // Garbage instead of a handshake is dropped too.
  std::string host;
  int port = 0;
  net::parseHostPort(job[1]->address(), &host, &port);
  net::Socket junk = net::connectWithRetry(host, port, Clock::now() + 5000ms);
  std::string bytes(200, 'G');
  net::sendAll(junk.fd(), bytes.data(), bytes.size(), Clock::now() + 5000ms, "junk");
  EXPECT_TRUE(test::peerClosedWithin(junk.fd(), Millis(5000)));
  // Rank 0 was not locked out by the stranger posing as it.
  sendText(*job[0], "honest", 1, 1);
  EXPECT_EQ(recvText(*job[1], 6, 0, 1), "honest");
}

TEST(PointToPoint, ConnectionsStillInTheHandshakeAreCappedAndRanksStillGetIn) {
  auto job = makeJob(2);
  std::string host;
  int port = 0;
  net::parseHostPort(job[1]->address(), &host, &port);
  std::vector<net::Socket> strangers;
  for (int i = 0; i <= net::kMaxPendingHandshakes; ++i) {
    strangers.push_back(net::connectWithRetry(host, port, Clock::now() + 5000ms));
  }
  // One over the cap: the oldest silent connection made room.
  EXPECT_TRUE(test::peerClosedWithin(strangers[0].fd(), Millis(5000)));
  sendText(*job[0], "through", 1, 1);
  EXPECT_EQ(recvText(*job[1], 7, 0, 1), "through");
  // The rank's connection evicted the next oldest; the newest strangers are still waiting.
  EXPECT_TRUE(test::peerClosedWithin(strangers[1].fd(), Millis(5000)));
  for (size_t i = strangers.size() - 3; i < strangers.size(); ++i) {
    EXPECT_FALSE(test::peerClosedWithin(strangers[i].fd(), Millis(100))) << "stranger " << i;
  }
}

TEST(PointToPoint, ASecondConnectionClaimingAConnectedRankIsRefused) {
  auto job = makeJob(2);
  sendText(*job[0], "first", 1, 1);
  EXPECT_EQ(recvText(*job[1], 5, 0, 1), "first");
  try {
    connectAs(*job[1], 0, kSecret);
    FAIL() << "a second connection from rank 0 was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos) << e.what();
  }
  sendText(*job[0], "still", 1, 1);
  EXPECT_EQ(recvText(*job[1], 5, 0, 1), "still");
}

TEST(PointToPoint, AMalformedHeaderDropsTheConnectionAndFailsReceivesFromThatPeer) {
  auto job = makeJob(3);
  std::atomic<bool> failed{false};
  std::string why;
  std::thread waiting([&] {
    try {
      recvText(*job[1], 4, 2, 1, nullptr, Millis(60000));
    } catch (const IoError& e) {
      why = e.what();
      failed = true;
    }
  });
  // Rank 2's slot, taken by a peer that knows the secret but sends garbage after one message.
  net::Socket s = connectAs(*job[1], 2, kSecret);
  std::string good(kMessageHeaderBytes, '\0');
  MessageHeader h;
  h.tag = 5;
  h.length = 2;
  encodeMessageHeader(h, reinterpret_cast<uint8_t*>(&good[0]));
  std::string wire = good + "ok" + std::string(kMessageHeaderBytes, 'Z');
  net::sendAll(s.fd(), wire.data(), wire.size(), Clock::now() + 5000ms, "test peer");
  EXPECT_TRUE(test::peerClosedWithin(s.fd(), Millis(5000)));
  waiting.join();
  EXPECT_TRUE(failed);
  EXPECT_NE(why.find("malformed message header"), std::string::npos) << why;
  EXPECT_EQ(recvText(*job[1], 2, 2, 5), "ok");  // what came before the garbage stays
  // The other peers are unaffected.
  sendText(*job[0], "fine", 1, 1);
  EXPECT_EQ(recvText(*job[1], 4, 0, 1), "fine");
}

TEST(PointToPoint, ConcurrentSendsToOnePeerArriveWholeAndIntact) {
  auto job = makeJob(2);
  const int threads = 8;
  const int each = 40;
  std::vector<std::thread> senders;
  // Every fourth message is larger than a socket buffer, so its write is split and could
  // interleave with another thread's; the rest are small.
  auto sizeOf = [](int t, int i) -> size_t {
    return i % 4 == 0 ? (512u << 10) + t * 1000 + i : 1 + (i * 7919 + t * 104729) % 5000;
  };
  for (int t = 0; t < threads; ++t) {
    senders.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) {
        std::string data = pattern(sizeOf(t, i), t * 1000 + i);
        job[0]->send(data.data(), data.size(), 1, 100 + t, kLong);
      }
    });
  }
  std::vector<std::thread> receivers;
  std::atomic<int> intact{0};
  for (int t = 0; t < threads; ++t) {
    receivers.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) {
        std::string want = pattern(sizeOf(t, i), t * 1000 + i);
        std::string got = recvText(*job[1], want.size(), 0, 100 + t);
        if (got == want) ++intact;
      }
    });
  }
  for (auto& s : senders) s.join();
  for (auto& r : receivers) r.join();
  EXPECT_EQ(intact, threads * each);
}

TEST(PointToPoint, CloseFailsAPendingRecvWithShutdownErrorAndLaterCallsToo) {
  auto job = makeJob(2);
  std::atomic<bool> shutDown{false};
  std::thread waiting([&] {
    try {
      recvText(*job[1], 4, 0, 1, nullptr, Millis(60000));
    } catch (const ShutdownError&) {
      shutDown = true;
    }
  });
  std::this_thread::sleep_for(100ms);
  auto start = std::chrono::steady_clock::now();
  job[1]->close();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5000ms);
  waiting.join();
  EXPECT_TRUE(shutDown);
  EXPECT_THROW(recvText(*job[1], 4, 0, 1), ShutdownError);
  EXPECT_THROW(sendText(*job[1], "x", 0, 1), ShutdownError);
  job[1]->close();  // idempotent
}

TEST(PointToPoint, CloseWakesASendBlockedOnAPeerThatDoesNotAnswer) {
  // A listener that accepts and authenticates nothing: the connect succeeds (the backlog) but the
  // handshake never answers, so the send waits inside the channel until close().
  int port = 0;
  net::Socket silent = net::listenOn("127.0.0.1", 0, &port);
  Channel c(0, 2, kSecret, "127.0.0.1");
  c.setPeers({c.address(), net::joinHostPort("127.0.0.1", port)});
  std::atomic<bool> shutDown{false};
  std::thread sending([&] {
    try {
      sendText(c, "never", 1, 1);
    } catch (const ShutdownError&) {
      shutDown = true;
    }
  });
  std::this_thread::sleep_for(100ms);
  c.close();
  sending.join();
  EXPECT_TRUE(shutDown);
}

TEST(PointToPoint, ASendTimeoutNamesThePeer) {
  int port = 0;
  net::Socket silent = net::listenOn("127.0.0.1", 0, &port);
  Channel c(0, 2, kSecret, "127.0.0.1");
  c.setPeers({c.address(), net::joinHostPort("127.0.0.1", port)});
  try {
    c.send("x", 1, 1, 8, 200ms);
    FAIL() << "the send did not time out";
  } catch (const TimeoutError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("send to rank 1 with tag 8"), std::string::npos) << what;
  }
}

TEST(PointToPoint, InvalidPeersAreRefusedAtOnce) {
  auto job = makeJob(2);
  EXPECT_THROW(sendText(*job[0], "self", 0, 1), InvalidArgument);
  EXPECT_THROW(sendText(*job[0], "far", 2, 1), InvalidArgument);
  EXPECT_THROW(sendText(*job[0], "neg", -1, 1), InvalidArgument);
  EXPECT_THROW(recvText(*job[0], 1, 0, 1), InvalidArgument);
  EXPECT_THROW(recvText(*job[0], 1, 5, 1), InvalidArgument);
  EXPECT_THROW(job[0]->setPeers({"127.0.0.1:1"}), InvalidArgument);
  EXPECT_THROW(job[0]->setPeers({"127.0.0.1:1", "127.0.0.1:2"}), InvalidArgument);
  EXPECT_THROW(Channel(2, 2, kSecret, "127.0.0.1"), InvalidArgument);
  Channel fresh(0, 2, kSecret, "127.0.0.1");
  EXPECT_THROW(sendText(fresh, "no peers", 1, 1), InvalidArgument);
}

}  // namespace
}  // namespace p2p
}  // namespace hora
