#pragma once
// The connection handshake: every TCP connection the engine accepts (store, data mesh, control
// plane) starts with it, so a process that does not know the job secret never gets further.
//
// The exchange (byte layouts in handshake.cc; clang-format off/on keeps the columns as drawn):
// clang-format off
//   acceptor  -> connector  Challenge { nonceA }
//   connector -> acceptor   Hello     { kind, rank, nonceC,
//                                       HMAC(secret, "hora-hello" nonceA kind rank nonceC) }
//   acceptor  -> connector  Welcome   { status, rank,
//                                       HMAC(secret, "hora-welcome" nonceC nonceA status rank) }
// clang-format on
//
// Both sides prove the secret over a fresh nonce chosen by the other, so neither a replay nor a
// stranger posing as a rank passes. Messages are frames (magic + version + length) of fixed size.
//
// Handshake is an I/O-free state machine, so the same logic runs in non-blocking event loops (mesh
// set-up, store server) and in blocking clients (runHandshake). It never asks for more input than
// the current message holds: the caller cannot read past the handshake into the stream after it.
// Not thread-safe; one object per connection.
#include <cstdint>
#include <functional>
#include <string>

#include "core/common/time.h"

namespace hora {
class WireReader;
namespace net {

enum class PeerKind : uint8_t { Store = 1, Data = 2, Control = 3, P2p = 4 };
const char* peerKindName(PeerKind kind);

// Why a handshake failed, for callers that treat the cases differently (a rejection is worth a
// warning; a malformed or misdirected exchange is routine while peers start).
enum class HandshakeFailure {
  None,       // not failed
  Malformed,  // bytes that are not a handshake message of this protocol version
  BadProof,   // a proof of the job secret did not verify, on either side
  Refused,    // the acceptor authenticated the connector but would not take it (kind, rank)
  WrongPeer,  // the acceptor proved the secret but is not the rank the connector wanted
};

class Handshake {
 public:
  enum class State { Running, Done, Failed };
  // Decides whether an authenticated connector may stay: "" to accept, otherwise the reason.
  using Validator = std::function<std::string(PeerKind kind, int rank)>;

  static Handshake acceptor(const std::string& secret, int localRank, Validator validate);
  // expectedPeerRank < 0 accepts any acceptor rank.
  static Handshake connector(const std::string& secret, PeerKind kind, int localRank,
                             int expectedPeerRank);

  State state() const { return state_; }
  const std::string& failure() const { return failure_; }
  HandshakeFailure failureKind() const { return failureKind_; }
  PeerKind peerKind() const { return peerKind_; }
  int peerRank() const { return peerRank_; }

  // Bytes to send now. A Failed acceptor may still hold a rejection worth a best-effort send.
  const char* outputData() const { return out_.data() + outSent_; }
  size_t outputPending() const { return out_.size() - outSent_; }
  void outputSent(size_t n);
  // How many bytes to read next (0 while output is pending or once finished).
  size_t inputWanted() const;
  void input(const void* data, size_t n);

 private:
  enum class Step { ReadChallenge, ReadHello, ReadWelcome, Finished };
  Handshake() = default;
  void onMessage();
  // One per step: the message that step accepts, read from its payload.
  void onChallenge(WireReader& r);  // connector
  void onHello(WireReader& r);      // acceptor
  void onWelcome(WireReader& r);    // connector
  void fail(HandshakeFailure kind, const std::string& why);

  bool isAcceptor_ = false;
  std::string secret_;
  int localRank_ = -1;
  int expectedPeerRank_ = -1;
  Validator validate_;
  Step step_ = Step::Finished;
  State state_ = State::Running;
  std::string failure_;
  HandshakeFailure failureKind_ = HandshakeFailure::None;
  PeerKind localKind_ = PeerKind::Store;
  PeerKind peerKind_ = PeerKind::Store;
  int peerRank_ = -1;
  std::string nonceA_, nonceC_;
  std::string out_;
  size_t outSent_ = 0;
  std::string in_;
  size_t inExpected_ = 0;
};

// Drives a handshake over a non-blocking socket, blocking in poll() up to the deadline. Throws
// IoError "<what>: authentication failed: ..." / "<what>: connection closed during the handshake"
// or TimeoutError.
void runHandshake(int fd, Handshake& hs, Clock::time_point deadline, const std::string& what);

// One non-blocking step of a handshake over a non-blocking socket, for event loops: sends what
// is pending and reads what is wanted until the kernel would block. Running: poll for POLLOUT
// when outputPending() > 0, else POLLIN, then call again. Done only once every byte of output
// (the acceptor's Welcome) is sent. Failed: *why says why; *rejected is true when a side refused
// the other (a bad proof, or a refused kind or rank), false when the connection closed or carried
// bytes that are not a handshake. *error holds the errno of a closed or failed socket (0 else).
enum class HandshakeProgress { Running, Done, Failed };
HandshakeProgress pumpHandshake(int fd, Handshake& hs, std::string* why, bool* rejected,
                                int* error);

// Limits on connections that have not yet proved the job secret, applied by every listener (the
// store server and the mesh set-up): at most kMaxPendingHandshakes at a time (a new one evicts the
// oldest, so a stranger holding connections open cannot lock the ranks out) and each for at most
// kHandshakeTimeout (an honest peer needs one round trip).
constexpr int kMaxPendingHandshakes = 64;
constexpr Millis kHandshakeTimeout{10000};

// Cryptographically random bytes from the kernel.
std::string randomBytes(size_t n);

}  // namespace net
}  // namespace hora
