// The connection handshake (protocol summary in handshake.h). Three fixed-size frames:
//
//   Challenge  acceptor -> connector   nonceA (32 random bytes)
//   Hello      connector -> acceptor   kind u8, rank u32, nonceC, HMAC(secret, "hora-hello" nonceA
//                                      kind rank nonceC)
//   Welcome    acceptor -> connector   status u8, rank u32, HMAC(secret, "hora-welcome" nonceC
//                                      nonceA status rank) or 32 zero bytes when status != accepted
//
// What each step proves:
// - The Hello MAC covers the acceptor's fresh nonceA, so it proves the connector knows the secret
//   now: a recorded Hello is useless against any later Challenge. It also binds the claimed kind
//   and rank, so an eavesdropper cannot replay the proof under another rank.
// - The Welcome MAC covers the connector's fresh nonceC (and nonceA, status and rank), so the
//   connector knows it reached a process that holds the secret, not a squatter on the port, and
//   which rank that process is.
// - Both MACs start with a distinct label, so a Hello proof can never pass as a Welcome proof.
// Every message has a fixed length, so the reader asks for exactly one message at a time and
// never consumes bytes that belong to the stream after the handshake.
#include "core/net/handshake.h"

#include <errno.h>
#include <sys/random.h>

#include <algorithm>
#include <cstring>

#include "core/common/errors.h"
#include "core/common/hmac.h"
#include "core/net/frame.h"
#include "core/net/socket.h"

namespace hora {
namespace net {
namespace {

// 256-bit nonces: a repeat is never expected, so an old proof never verifies again.
constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;  // HMAC-SHA256

enum MessageType : uint16_t { kChallenge = 1, kHello = 2, kWelcome = 3 };
enum WelcomeStatus : uint8_t { kAccepted = 0, kBadProof = 1, kRefused = 2 };

constexpr size_t kChallengePayload = kNonceBytes;
constexpr size_t kHelloPayload = 1 + 4 + kNonceBytes + kMacBytes;
constexpr size_t kWelcomePayload = 1 + 4 + kMacBytes;

std::string mac(const std::string& secret, const std::string& message) {
  Sha256Digest d = hmacSha256(secret, message);
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

std::string helloMac(const std::string& secret, const std::string& nonceA, PeerKind kind, int rank,
                     const std::string& nonceC) {
  Writer w;
  w.str("hora-hello").str(nonceA).u8(static_cast<uint8_t>(kind)).u32(static_cast<uint32_t>(rank));
  w.str(nonceC);
  return mac(secret, w.data());
}

std::string welcomeMac(const std::string& secret, const std::string& nonceC,
                       const std::string& nonceA, uint8_t status, int rank) {
  Writer w;
  w.str("hora-welcome").str(nonceC).str(nonceA).u8(status).u32(static_cast<uint32_t>(rank));
  return mac(secret, w.data());
}

// Constant time, so a stranger cannot learn a valid proof byte by byte from response timings.
bool macEqual(const std::string& a, const std::string& b) {
  return a.size() == b.size() && constantTimeEqual(a.data(), b.data(), a.size());
}

}  // namespace

const char* peerKindName(PeerKind kind) {
  switch (kind) {
    case PeerKind::Store: return "store";
    case PeerKind::Data: return "data";
    case PeerKind::Control: return "control";
    case PeerKind::P2p: return "point-to-point";
  }
  return "unknown";
}

std::string randomBytes(size_t n) {
  std::string out(n, '\0');
  size_t done = 0;
  while (done < n) {
    ssize_t got = getrandom(&out[done], n - done, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      throw IoError(std::string("cannot read random bytes: ") + std::strerror(errno));
    }
    done += static_cast<size_t>(got);
  }
  return out;
}

// The acceptor speaks first: its nonce must be in the connector's proof, so the connector cannot
// prepare (or replay) a Hello before it has seen this connection's challenge.
Handshake Handshake::acceptor(const std::string& secret, int localRank, Validator validate) {
  Handshake h;
  h.isAcceptor_ = true;
  h.secret_ = secret;
  h.localRank_ = localRank;
  h.validate_ = std::move(validate);
  h.nonceA_ = randomBytes(kNonceBytes);
  h.out_ = buildFrame(kHandshakeMagic, kChallenge, h.nonceA_);
  h.step_ = Step::ReadHello;
  h.inExpected_ = kFrameHeaderBytes + kHelloPayload;
  return h;
}

Handshake Handshake::connector(const std::string& secret, PeerKind kind, int localRank,
                               int expectedPeerRank) {
  Handshake h;
  h.secret_ = secret;
  h.localKind_ = kind;
  h.localRank_ = localRank;
  h.expectedPeerRank_ = expectedPeerRank;
  h.nonceC_ = randomBytes(kNonceBytes);
  h.step_ = Step::ReadChallenge;
  h.inExpected_ = kFrameHeaderBytes + kChallengePayload;
  return h;
}

void Handshake::outputSent(size_t n) {
  outSent_ += n;
  if (outSent_ >= out_.size()) {
    out_.clear();
    outSent_ = 0;
  }
}

size_t Handshake::inputWanted() const {
  if (state_ != State::Running || outputPending() > 0) return 0;
  return inExpected_ - in_.size();
}

void Handshake::input(const void* data, size_t n) {
  HORA_CHECK(n <= inputWanted(), "handshake fed more bytes than it asked for");
  in_.append(static_cast<const char*>(data), n);
  if (in_.size() == inExpected_) onMessage();
}

void Handshake::fail(HandshakeFailure kind, const std::string& why) {
  state_ = State::Failed;
  failure_ = why;
  failureKind_ = kind;
  step_ = Step::Finished;
}

void Handshake::onMessage() {
  // Indexed by step_: the one message type each step accepts. A message out of order is as bad
  // as a wrong magic: the peer does not speak this protocol (or is probing it).
  static const uint16_t kExpectedType[] = {kChallenge, kHello, kWelcome};
  FrameHeader h = decodeHeader(reinterpret_cast<const uint8_t*>(in_.data()));
  std::string bad = validateHeader(h, kHandshakeMagic, 1024);
  if (bad.empty() && (h.type != kExpectedType[static_cast<int>(step_)] ||
                      h.length != in_.size() - kFrameHeaderBytes)) {
    bad = "unexpected handshake message type " + std::to_string(h.type);
  }
  if (!bad.empty()) return fail(HandshakeFailure::Malformed, "malformed handshake: " + bad);
  Reader r(in_.data() + kFrameHeaderBytes, h.length);
  in_.clear();

  switch (step_) {
    case Step::ReadChallenge: return onChallenge(r);
    case Step::ReadHello: return onHello(r);
    case Step::ReadWelcome: return onWelcome(r);
    case Step::Finished: break;
  }
  HORA_CHECK(false, "handshake message after the end");
}

void Handshake::onChallenge(Reader& r) {
  nonceA_.resize(kNonceBytes);
  r.bytes(&nonceA_[0], kNonceBytes);
  Writer w;
  w.u8(static_cast<uint8_t>(localKind_)).u32(static_cast<uint32_t>(localRank_));
  w.bytes(nonceC_.data(), kNonceBytes);
  w.bytes(helloMac(secret_, nonceA_, localKind_, localRank_, nonceC_).data(), kMacBytes);
  out_ = buildFrame(kHandshakeMagic, kHello, w.data());
  step_ = Step::ReadWelcome;
  inExpected_ = kFrameHeaderBytes + kWelcomePayload;
}

void Handshake::onHello(Reader& r) {
  uint8_t kindByte = r.u8();
  int rank = static_cast<int32_t>(r.u32());
  nonceC_.resize(kNonceBytes);
  r.bytes(&nonceC_[0], kNonceBytes);
  std::string proof(kMacBytes, '\0');
  r.bytes(&proof[0], kMacBytes);
  uint8_t status = kAccepted;
  std::string why;
  // The proof is checked before anything it claims is believed: an unauthenticated peer gets
  // the same answer whatever kind or rank it names.
  if (!macEqual(proof,
                helloMac(secret_, nonceA_, static_cast<PeerKind>(kindByte), rank, nonceC_))) {
    status = kBadProof;
    why = "authentication failed: the peer's proof of the job secret is wrong";
  } else if (kindByte < 1 || kindByte > static_cast<uint8_t>(PeerKind::P2p)) {
    status = kRefused;
    why = "unknown connection kind " + std::to_string(kindByte);
  } else {
    peerKind_ = static_cast<PeerKind>(kindByte);
    peerRank_ = rank;
    if (validate_) why = validate_(peerKind_, rank);
    if (!why.empty()) status = kRefused;
  }
  // A rejection carries no proof: a stranger learns nothing from it.
  std::string proofBack = status == kAccepted
                              ? welcomeMac(secret_, nonceC_, nonceA_, status, localRank_)
                              : std::string(kMacBytes, '\0');
  Writer w;
  w.u8(status).u32(static_cast<uint32_t>(localRank_)).bytes(proofBack.data(), kMacBytes);
  out_ = buildFrame(kHandshakeMagic, kWelcome, w.data());
  outSent_ = 0;
  if (status != kAccepted) {
    return fail(status == kBadProof ? HandshakeFailure::BadProof : HandshakeFailure::Refused, why);
  }
  step_ = Step::Finished;
  state_ = State::Done;
}

void Handshake::onWelcome(Reader& r) {
  uint8_t status = r.u8();
  int rank = static_cast<int32_t>(r.u32());
  std::string proof(kMacBytes, '\0');
  r.bytes(&proof[0], kMacBytes);
  // A rejection carries no MAC, so these statuses are believed without proof. That is safe:
  // believing one only ends a connection, which an attacker on the path could do anyway.
  if (status == kBadProof) {
    return fail(HandshakeFailure::BadProof,
                "authentication failed: the peer rejected our proof of the job secret (is the "
                "secret the same on every rank?)");
  }
  if (status != kAccepted) {
    return fail(HandshakeFailure::Refused,
                "the peer refused the connection (unexpected or duplicate rank)");
  }
  if (!macEqual(proof, welcomeMac(secret_, nonceC_, nonceA_, status, rank))) {
    return fail(HandshakeFailure::BadProof,
                "authentication failed: the peer could not prove it knows the job secret");
  }
  // The rank is inside the Welcome MAC, so it is the acceptor's real rank: a mismatch means
  // the address led to another rank of this job (a stale or mixed-up address), not a stranger.
  if (expectedPeerRank_ >= 0 && rank != expectedPeerRank_) {
    return fail(HandshakeFailure::WrongPeer, "reached rank " + std::to_string(rank) +
                                                 " instead of rank " +
                                                 std::to_string(expectedPeerRank_));
  }
  peerRank_ = rank;
  peerKind_ = localKind_;
  step_ = Step::Finished;
  state_ = State::Done;
}

// Blocking driver. Pending output is sent even after a failure, so a rejection reaches the peer
// (which then reports why, not just EOF), and the handshake's own failure is reported in
// preference to the I/O error that may follow it.
void runHandshake(int fd, Handshake& hs, Clock::time_point deadline, const std::string& what) {
  char buf[256];
  while (hs.state() == Handshake::State::Running || hs.outputPending() > 0) {
    if (hs.outputPending() > 0) {
      IoResult r = sendSome(fd, hs.outputData(), hs.outputPending());
      if (r.status == IoStatus::Ok) {
        hs.outputSent(r.bytes);
        continue;
      }
      if (r.status != IoStatus::WouldBlock) {
        if (hs.state() == Handshake::State::Failed) break;
        throw IoError(what + ": " + describe(r) + " during the handshake");
      }
      if (!waitFor(fd, POLLOUT, deadline))
        throw TimeoutError(what + ": timed out during the handshake");
      continue;
    }
    size_t want = std::min(hs.inputWanted(), sizeof(buf));
    IoResult r = recvSome(fd, buf, want);
    if (r.status == IoStatus::Ok) {
      hs.input(buf, r.bytes);
    } else if (r.status == IoStatus::WouldBlock) {
      if (!waitFor(fd, POLLIN, deadline))
        throw TimeoutError(what + ": timed out during the handshake");
    } else {
      throw IoError(what + ": connection closed during the handshake (" + describe(r) +
                    "; wrong port, or the peer rejected us)");
    }
  }
  if (hs.state() == Handshake::State::Failed) {
    if (hs.failureKind() == HandshakeFailure::BadProof) {
      throw AuthenticationError(what + ": " + hs.failure());
    }
    throw IoError(what + ": " + hs.failure());
  }
}

HandshakeProgress pumpHandshake(int fd, Handshake& hs, std::string* why, bool* rejected,
                                int* error) {
  *rejected = false;
  *error = 0;
  char buf[256];
  for (;;) {
    if (hs.outputPending() > 0) {
      IoResult r = sendSome(fd, hs.outputData(), hs.outputPending());
      if (r.status == IoStatus::WouldBlock) return HandshakeProgress::Running;
      if (r.status != IoStatus::Ok) {
        *why = describe(r) + " during the handshake";
        *error = r.error;
        return HandshakeProgress::Failed;
      }
      hs.outputSent(r.bytes);
      continue;
    }
    if (hs.state() == Handshake::State::Failed) {
      *why = hs.failure();
      *rejected = hs.failureKind() == HandshakeFailure::BadProof ||
                  hs.failureKind() == HandshakeFailure::Refused;
      return HandshakeProgress::Failed;
    }
    if (hs.state() == Handshake::State::Done) return HandshakeProgress::Done;
    // Never more than inputWanted(): the bytes after the handshake stay in the socket.
    IoResult r = recvSome(fd, buf, std::min(sizeof(buf), hs.inputWanted()));
    if (r.status == IoStatus::WouldBlock) return HandshakeProgress::Running;
    if (r.status != IoStatus::Ok) {
      *why = describe(r) + " during the handshake";
      *error = r.error;
      return HandshakeProgress::Failed;
    }
    hs.input(buf, r.bytes);
  }
}

}  // namespace net
}  // namespace hora
