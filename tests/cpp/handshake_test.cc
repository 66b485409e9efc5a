// The handshake state machine driven in memory, two objects feeding each other: how each failure
// is classified (HandshakeFailure), which callers rely on instead of the message text.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/net/frame.h"
#include "core/net/handshake.h"

namespace hora {
namespace net {
namespace {

// Moves bytes between the two until neither can progress.
void exchange(Handshake& acceptor, Handshake& connector) {
  for (int round = 0; round < 100; ++round) {
    bool moved = false;
    for (auto* from : {&acceptor, &connector}) {
      Handshake* to = from == &acceptor ? &connector : &acceptor;
      while (from->outputPending() > 0) {
        size_t n = std::min(from->outputPending(), to->inputWanted());
        if (n == 0) {
          from->outputSent(from->outputPending());  // the peer stopped listening: bytes are lost
          break;
        }
        to->input(from->outputData(), n);
        from->outputSent(n);
        moved = true;
      }
    }
    if (!moved) return;
  }
}

Handshake::Validator acceptAll() {
  return [](PeerKind, int) { return std::string(); };
}

TEST(Handshake, MatchingSecretsConnect) {
  Handshake a = Handshake::acceptor("s", 0, acceptAll());
  Handshake c = Handshake::connector("s", PeerKind::Data, 1, 0);
  exchange(a, c);
  EXPECT_EQ(a.state(), Handshake::State::Done);
  EXPECT_EQ(c.state(), Handshake::State::Done);
  EXPECT_EQ(a.failureKind(), HandshakeFailure::None);
  EXPECT_EQ(a.peerRank(), 1);
  EXPECT_EQ(c.peerRank(), 0);
}

TEST(Handshake, AWrongSecretIsABadProofOnBothSides) {
  Handshake a = Handshake::acceptor("right", 0, acceptAll());
  Handshake c = Handshake::connector("wrong", PeerKind::Data, 1, 0);
  exchange(a, c);
  EXPECT_EQ(a.failureKind(), HandshakeFailure::BadProof);
  EXPECT_EQ(c.failureKind(), HandshakeFailure::BadProof);
}

TEST(Handshake, AValidatorRefusalIsRefused) {
  Handshake a = Handshake::acceptor("s", 0, [](PeerKind, int) { return std::string("duplicate"); });
  Handshake c = Handshake::connector("s", PeerKind::Data, 1, 0);
  exchange(a, c);
  EXPECT_EQ(a.failureKind(), HandshakeFailure::Refused);
  EXPECT_EQ(c.failureKind(), HandshakeFailure::Refused);
}

TEST(Handshake, TheWrongRankIsAWrongPeer) {
  Handshake a = Handshake::acceptor("s", 2, acceptAll());
  Handshake c = Handshake::connector("s", PeerKind::Data, 1, 0);
  exchange(a, c);
  EXPECT_EQ(a.state(), Handshake::State::Done);
  EXPECT_EQ(c.failureKind(), HandshakeFailure::WrongPeer);
}

TEST(Handshake, GarbageIsMalformed) {
  Handshake c = Handshake::connector("s", PeerKind::Data, 1, 0);
  std::string junk(c.inputWanted(), 'x');
  c.input(junk.data(), junk.size());
  EXPECT_EQ(c.state(), Handshake::State::Failed);
  EXPECT_EQ(c.failureKind(), HandshakeFailure::Malformed);
}

}  // namespace
}  // namespace net
}  // namespace hora
