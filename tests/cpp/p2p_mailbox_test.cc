// The point-to-point mailbox and stream reader without sockets: the test plays the I/O thread
// (arrive, chunks, peer lost) and the receiving threads by hand, so every matching rule is checked
// deterministically. Then the message header codec and the stream reader on bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/common/errors.h"
#include "core/p2p/inbound_stream.h"
#include "core/p2p/mailbox.h"
#include "core/p2p/message_header.h"

namespace hora {
namespace p2p {
namespace {

using namespace std::chrono_literals;

std::string bytesOf(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }

// Writes up to n bytes of payload from `from` (advancing it) into the source's next chunk.
size_t feedChunk(Mailbox& m, int source, const std::string& payload, size_t* at, size_t n) {
  PayloadChunk c = m.beginChunk(source);
  size_t k = std::min({n, c.bytes, payload.size() - *at});
  if (c.data != nullptr && k > 0) std::memcpy(c.data, payload.data() + *at, k);
  *at += k;
  m.endChunk(source, k);
  return k;
}

// Delivers a whole message as the I/O thread would: the header, then the payload in pieces.
void deliver(Mailbox& m, int source, int64_t tag, const std::string& payload, size_t piece = 7) {
  m.arrive(source, tag, payload.size());
  size_t at = 0;
  while (at < payload.size()) feedChunk(m, source, payload, &at, piece);
}

// A receive with its own buffer.
struct Recv {
  Recv(size_t bytes, int source, int64_t tag)
      : buffer(bytes, 0), r(buffer.data(), bytes, source, tag) {}
  std::vector<uint8_t> buffer;
  Receive r;
  std::string text() const { return bytesOf(buffer); }
};

std::string errorOf(const Receive& r) {
  try {
    r.result();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Mailbox, AReceivePostedFirstGetsThePayloadStraightIntoItsBuffer) {
  Mailbox m(0, 2);
  Recv a(5, 1, 9);
  m.post(a.r);
  EXPECT_FALSE(m.test(a.r));
  m.arrive(1, 9, 5);
  PayloadChunk c = m.beginChunk(1);
  EXPECT_EQ(c.data, a.buffer.data());  // no staging copy
  EXPECT_EQ(c.bytes, 5u);
  std::memcpy(c.data, "hello", 5);
  m.endChunk(1, 5);
  ASSERT_TRUE(m.test(a.r));
  EXPECT_EQ(a.r.result(), 1);
  EXPECT_EQ(a.text(), "hello");
  EXPECT_EQ(m.unexpectedMessages(), 0u);
}

TEST(Mailbox, AMessageThatArrivesFirstWaitsForItsReceive) {
  Mailbox m(0, 2);
  deliver(m, 1, 3, "early bird");
  EXPECT_EQ(m.unexpectedMessages(), 1u);
  Recv a(10, 1, 3);
  m.post(a.r);
  ASSERT_TRUE(m.test(a.r));
  EXPECT_EQ(a.r.result(), 1);
  EXPECT_EQ(a.text(), "early bird");
  EXPECT_EQ(m.unexpectedMessages(), 0u);
}

TEST(Mailbox, MessagesFromOneSourceWithOneTagAreReceivedInSendingOrder) {
  Mailbox m(0, 2);
  // Some arrive before their receives, some after: the order holds either way.
  for (int i = 0; i < 3; ++i) deliver(m, 1, 4, "msg" + std::to_string(i));
  std::vector<std::unique_ptr<Recv>> recvs;
  for (int i = 0; i < 6; ++i) {
    recvs.push_back(std::make_unique<Recv>(4, 1, 4));
    m.post(recvs.back()->r);
  }
  for (int i = 3; i < 6; ++i) deliver(m, 1, 4, "msg" + std::to_string(i));
  for (int i = 0; i < 6; ++i) {
    ASSERT_TRUE(m.test(recvs[i]->r)) << i;
    EXPECT_EQ(recvs[i]->text(), "msg" + std::to_string(i));
  }
}

TEST(Mailbox, TagsAreMatchedIndependentlyOfArrivalOrder) {
  Mailbox m(0, 2);
  Recv two(1, 1, 2);
  m.post(two.r);
  deliver(m, 1, 1, "A");  // tag 1 first: nobody waits for it
  EXPECT_FALSE(m.test(two.r));
  deliver(m, 1, 2, "B");
  ASSERT_TRUE(m.test(two.r));
  EXPECT_EQ(two.text(), "B");
  Recv one(1, 1, 1);
  m.post(one.r);
  ASSERT_TRUE(m.test(one.r));
  EXPECT_EQ(one.text(), "A");
}

TEST(Mailbox, AnySourceTakesTheOldestArrivalAcrossSources) {
  Mailbox m(0, 4);
  deliver(m, 3, 7, "3");
  deliver(m, 1, 7, "1");
  deliver(m, 2, 8, "x");  // another tag
  deliver(m, 2, 7, "2");
  std::string order;
  for (int i = 0; i < 3; ++i) {
    Recv a(1, kAnySource, 7);
    m.post(a.r);
    ASSERT_TRUE(m.test(a.r));
    EXPECT_EQ(a.text(), std::to_string(a.r.result()));
    order += a.text();
  }
  EXPECT_EQ(order, "312");
  EXPECT_EQ(m.unexpectedMessages(), 1u);  // tag 8 is still there
}

TEST(Mailbox, AnArrivalGoesToTheOldestPostedReceiveThatMatches) {
  Mailbox m(0, 3);
  Recv any(1, kAnySource, 5);
  Recv fromOne(1, 1, 5);
  Recv fromTwo(1, 2, 5);
  m.post(any.r);
  m.post(fromOne.r);
  m.post(fromTwo.r);
  deliver(m, 1, 5, "a");  // the any-source receive was posted first
  ASSERT_TRUE(m.test(any.r));
  EXPECT_EQ(any.r.result(), 1);
  EXPECT_FALSE(m.test(fromOne.r));
  deliver(m, 1, 5, "b");
  ASSERT_TRUE(m.test(fromOne.r));
  EXPECT_EQ(fromOne.text(), "b");
  EXPECT_FALSE(m.test(fromTwo.r));
}

TEST(Mailbox, ASizeMismatchFailsTheReceiveNamingBothSizesAndConsumesTheMessage) {
  Mailbox m(0, 2);
  // Posted first: the message is read and dropped.
  Recv small(4, 1, 6);
  m.post(small.r);
  deliver(m, 1, 6, "eight by");
  ASSERT_TRUE(m.test(small.r));
  try {
    small.r.result();
    FAIL() << "a size mismatch passed";
  } catch (const InvalidArgument& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("has 8 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("has 4 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1 with tag 6"), std::string::npos) << what;
  }
  // Arrived first: the receive that finds it fails and the message is gone too.
  deliver(m, 1, 6, "abc");
  Recv big(5, 1, 6);
  m.post(big.r);
  ASSERT_TRUE(m.test(big.r));
  EXPECT_THROW(big.r.result(), InvalidArgument);
  EXPECT_EQ(m.unexpectedMessages(), 0u);
  // The next message with that tag is received normally.
  deliver(m, 1, 6, "ok");
  Recv next(2, 1, 6);
  m.post(next.r);
  ASSERT_TRUE(m.test(next.r));
  EXPECT_EQ(next.text(), "ok");
}

TEST(Mailbox, AWithdrawnReceiveGivesItsHalfArrivedMessageBackInItsPlace) {
  Mailbox m(0, 2);
  Recv first(8, 1, 1);
  m.post(first.r);
  m.arrive(1, 1, 8);
  std::string payload = "abcdefgh";
  size_t at = 0;
  feedChunk(m, 1, payload, &at, 3);
  ASSERT_TRUE(m.withdraw(first.r));
  // The rest no longer goes into the withdrawn buffer.
  std::vector<uint8_t> before = first.buffer;
  while (at < payload.size()) feedChunk(m, 1, payload, &at, 2);
  EXPECT_EQ(first.buffer, before);
  // A message that arrived later with the same tag does not overtake it.
  deliver(m, 1, 1, "later!!!");
  Recv again(8, 1, 1);
  m.post(again.r);
  ASSERT_TRUE(m.test(again.r));
  EXPECT_EQ(again.text(), "abcdefgh");
  Recv third(8, 1, 1);
  m.post(third.r);
  ASSERT_TRUE(m.test(third.r));
  EXPECT_EQ(third.text(), "later!!!");
}

TEST(Mailbox, WithdrawWaitsForAChunkBeingWrittenIntoTheBuffer) {
  Mailbox m(0, 2);
  Recv a(4, 1, 1);
  m.post(a.r);
  m.arrive(1, 1, 4);
  PayloadChunk c = m.beginChunk(1);  // the I/O side is now writing into a's buffer
  std::atomic<bool> withdrawn{false};
  std::thread t([&] {
    EXPECT_TRUE(m.withdraw(a.r));
    withdrawn = true;
  });
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(withdrawn) << "withdraw returned while a chunk was being written into the buffer";
  std::memcpy(c.data, "wx", 2);
  m.endChunk(1, 2);
  t.join();
  EXPECT_TRUE(withdrawn);
  std::string rest = "wxyz";
  size_t at = 2;
  feedChunk(m, 1, rest, &at, 2);
  Recv b(4, 1, 1);
  m.post(b.r);
  ASSERT_TRUE(m.test(b.r));
  EXPECT_EQ(b.text(), "wxyz");
}

TEST(Mailbox, AReceiveThatFindsItsMessageStillArrivingGetsTheRestDirectly) {
  Mailbox m(0, 2);
  std::string payload(200000, 'p');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7);
  m.arrive(1, 2, payload.size());
  size_t at = 0;
  feedChunk(m, 1, payload, &at, 1000);
  Recv a(payload.size(), 1, 2);
  m.post(a.r);
  EXPECT_FALSE(m.test(a.r));
  PayloadChunk c = m.beginChunk(1);
  EXPECT_EQ(c.data, a.buffer.data() + at);  // the rest goes straight to the receive
  m.endChunk(1, 0);
  while (at < payload.size()) feedChunk(m, 1, payload, &at, 65536);
  ASSERT_TRUE(m.test(a.r));
  EXPECT_EQ(a.text(), payload);
}

TEST(Mailbox, AnUnexpectedMessageBufferGrowsOnlyWithTheBytesThatArrive) {
  Mailbox m(0, 2);
  m.arrive(1, 1, uint64_t(1) << 40);  // a terabyte announced
  PayloadChunk c = m.beginChunk(1);
  EXPECT_LE(c.bytes, kFirstUnexpectedBytes);
  m.endChunk(1, c.bytes);
  c = m.beginChunk(1);
  EXPECT_LE(c.bytes, kFirstUnexpectedBytes);  // doubled: as much again as has arrived
  m.endChunk(1, 0);
  m.peerLost(1, "rank 1 closed its point-to-point connection (test)");
  EXPECT_EQ(m.unexpectedMessages(), 0u);
}

TEST(Mailbox, ALostPeerFailsItsReceivesOnlyAfterItsArrivedMessagesAreTaken) {
  Mailbox m(0, 3);
  deliver(m, 1, 1, "kept");
  Recv waiting(4, 1, 2);
  m.post(waiting.r);
  Recv other(4, 2, 2);
  m.post(other.r);
  m.peerLost(1, "rank 1 closed its point-to-point connection (connection closed by peer)");
  ASSERT_TRUE(m.test(waiting.r));
  std::string why = errorOf(waiting.r);
  EXPECT_NE(why.find("rank 1 closed its point-to-point connection"), std::string::npos) << why;
  EXPECT_NE(why.find("tag 2"), std::string::npos) << why;
  EXPECT_THROW(waiting.r.result(), IoError);
  EXPECT_FALSE(m.test(other.r));  // rank 2 is still there
  Recv kept(4, 1, 1);
  m.post(kept.r);
  ASSERT_TRUE(m.test(kept.r));
  EXPECT_EQ(kept.text(), "kept");
  Recv later(4, 1, 1);
  m.post(later.r);
  ASSERT_TRUE(m.test(later.r));  // fails at once
  EXPECT_THROW(later.r.result(), IoError);
  ASSERT_TRUE(m.withdraw(other.r));
}

TEST(Mailbox, APeerLostInTheMiddleOfAMessageFailsTheReceiveItWasFilling) {
  Mailbox m(0, 2);
  Recv a(10, 1, 1);
  m.post(a.r);
  m.arrive(1, 1, 10);
  std::string payload = "0123456789";
  size_t at = 0;
  feedChunk(m, 1, payload, &at, 4);
  m.peerLost(1, "rank 1 closed its point-to-point connection (reset)");
  ASSERT_TRUE(m.test(a.r));
  std::string why = errorOf(a.r);
  EXPECT_NE(why.find("in the middle of the message"), std::string::npos) << why;
  EXPECT_NE(why.find("4 of 10 bytes"), std::string::npos) << why;
}

TEST(Mailbox, AnAnySourceReceiveFailsOnlyWhenEveryPeerIsGone) {
  Mailbox m(0, 3);
  Recv any(1, kAnySource, 1);
  m.post(any.r);
  m.peerLost(1, "rank 1 closed its point-to-point connection (test)");
  EXPECT_FALSE(m.test(any.r));  // rank 2 may still send
  m.peerLost(2, "rank 2 closed its point-to-point connection (test)");
  ASSERT_TRUE(m.test(any.r));
  EXPECT_NE(errorOf(any.r).find("every other rank"), std::string::npos) << errorOf(any.r);
  Recv later(1, kAnySource, 1);
  m.post(later.r);
  ASSERT_TRUE(m.test(later.r));
  EXPECT_THROW(later.r.result(), IoError);
}

TEST(Mailbox, ShutdownFailsPendingAndLaterReceivesAndStopsWritingIntoBuffers) {
  Mailbox m(0, 2);
  Recv posted(4, 1, 1);
  m.post(posted.r);
  Recv filling(4, 1, 2);
  m.post(filling.r);
  m.arrive(1, 2, 4);
  std::string payload = "abcd";
  size_t at = 0;
  feedChunk(m, 1, payload, &at, 1);
  m.shutdown("closed for the test");
  ASSERT_TRUE(m.test(posted.r));
  ASSERT_TRUE(m.test(filling.r));
  EXPECT_THROW(posted.r.result(), ShutdownError);
  EXPECT_THROW(filling.r.result(), ShutdownError);
  std::vector<uint8_t> before = filling.buffer;
  while (at < payload.size()) feedChunk(m, 1, payload, &at, 1);
  EXPECT_EQ(filling.buffer, before);
  Recv later(4, 1, 1);
  m.post(later.r);
  ASSERT_TRUE(m.test(later.r));
  EXPECT_THROW(later.r.result(), ShutdownError);
}

TEST(Mailbox, AWaitEndsAtItsDeadlineAndTheReceiveCanBeWithdrawn) {
  Mailbox m(0, 2);
  Recv a(1, 1, 1);
  m.post(a.r);
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(m.wait(a.r, Clock::now() + 50ms));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 45ms);
  EXPECT_TRUE(m.withdraw(a.r));
  deliver(m, 1, 1, "x");  // not taken by the withdrawn receive
  EXPECT_EQ(m.unexpectedMessages(), 1u);
}

// ---- Message header and stream reader -------------------------------------------------------

std::string header(int64_t tag, uint64_t length) {
  std::string out(kMessageHeaderBytes, '\0');
  MessageHeader h;
  h.tag = tag;
  h.length = length;
  encodeMessageHeader(h, reinterpret_cast<uint8_t*>(&out[0]));
  return out;
}

TEST(P2pMessageHeader, RoundTripsAndNamesWhatIsWrong) {
  std::string bytes = header(-5, 1234567890123ull);
  MessageHeader h;
  ASSERT_EQ(decodeMessageHeader(reinterpret_cast<const uint8_t*>(bytes.data()), &h), "");
  EXPECT_EQ(h.tag, -5);
  EXPECT_EQ(h.length, 1234567890123ull);
  std::string badMagic = bytes;
  badMagic[0] ^= 1;
  EXPECT_NE(
      decodeMessageHeader(reinterpret_cast<const uint8_t*>(badMagic.data()), &h).find("magic"),
      std::string::npos);
  std::string badVersion = bytes;
  badVersion[4] = 9;
  EXPECT_NE(decodeMessageHeader(reinterpret_cast<const uint8_t*>(badVersion.data()), &h)
                .find("version 9"),
            std::string::npos);
  std::string reserved = bytes;
  reserved[6] = 1;
  EXPECT_NE(
      decodeMessageHeader(reinterpret_cast<const uint8_t*>(reserved.data()), &h).find("reserved"),
      std::string::npos);
}

// Feeds bytes through a stream in pieces of `piece`, as reads from a socket would.
void feed(InboundStream& s, const std::string& bytes, size_t piece) {
  size_t at = 0;
  while (at < bytes.size() && !s.failed()) {
    PayloadChunk c = s.next();
    size_t n = std::min({c.bytes, piece, bytes.size() - at});
    std::memcpy(c.data, bytes.data() + at, n);
    at += n;
    s.advance(n);
  }
}

TEST(P2pInboundStream, DecodesMessagesSplitAnywhere) {
  std::string wire = header(1, 3) + "abc" + header(2, 0) + header(1, 5) + "defgh";
  for (size_t piece : {1, 2, 5, 100}) {
    Mailbox m(0, 2);
    InboundStream s(m, 1);
    feed(s, wire, piece);
    EXPECT_FALSE(s.failed());
    EXPECT_TRUE(s.atMessageBoundary());
    EXPECT_EQ(s.messagesRead(), 3u);
    Recv a(3, 1, 1), empty(0, 1, 2), b(5, 1, 1);
    for (Recv* r : {&a, &empty, &b}) {
      m.post(r->r);
      ASSERT_TRUE(m.test(r->r));
      EXPECT_EQ(r->r.result(), 1);
    }
    EXPECT_EQ(a.text(), "abc");
    EXPECT_EQ(b.text(), "defgh");
  }
}

TEST(P2pInboundStream, AMalformedHeaderFailsTheStreamForGood) {
  Mailbox m(0, 2);
  InboundStream s(m, 1);
  std::string bad = header(1, 2);
  bad[1] = 'X';
  feed(s, header(1, 2) + "ok" + bad + "zz", 3);
  ASSERT_TRUE(s.failed());
  EXPECT_NE(s.failure().find("after 1 message(s)"), std::string::npos) << s.failure();
  EXPECT_NE(s.failure().find("magic"), std::string::npos) << s.failure();
  EXPECT_EQ(m.unexpectedMessages(), 1u);  // the good message before it stays receivable
}

}  // namespace
}  // namespace p2p
}  // namespace hora
