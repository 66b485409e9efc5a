#pragma once
// TcpControlChannel: ControlChannel (see core/transport/control_channel.h) over the star of
// control connections made by the mesh: rank 0 holds one socket per other rank, every other rank
// holds one socket to rank 0.
//
// Messages travel as frames (net::kControlMagic, version, length). poll() waits in poll(2) on the
// sockets plus an eventfd that wakeup() signals from any thread (after polling them for `spin`;
// while the poller polls, wakeup() only bumps a counter it watches);
// partial frames stay buffered across calls. send() writes a whole frame; while the peer's
// window is full it keeps reading incoming frames into a stash (so two ranks sending to each
// other never deadlock) and fails with TimeoutError when nothing moves for the op timeout. A
// closed connection or a malformed frame throws IoError naming the peer. An idle connection to a
// crashed host or across a cut network fails within kUnreachableAfter (or the op timeout when
// shorter; TCP keepalive sized from it, setLivenessTimeout()), naming the peer's address and the
// ranks there, so a rank does not wait on it for the op timeout.
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/time.h"
#include "core/net/socket.h"
#include "core/transport/control_channel.h"

namespace hora {
namespace tcp {

// Keepalive and user-timeout options of a TCP socket such that a silent peer fails it within
// about `timeout` (at least 2 s); a socket that is not TCP/IP (a local socket pair) is left as it
// is. Throws IoError when the options cannot be set.
void setLivenessTimeout(int fd, Millis timeout);

// How long a peer's host may leave keepalive probes unanswered (and, on control connections,
// data unacknowledged) before the connection fails with ETIMEDOUT, when the op timeout is longer:
// a cut link or a dead host is reported within this. A live host's kernel answers whatever the
// peer process does (busy, stopped), so only an unreachable host is reported.
constexpr Millis kUnreachableAfter{8000};

class TcpControlChannel : public ControlChannel {
 public:
  // sockets: indexed by world rank, as MeshSockets::control.
  TcpControlChannel(int rank, int size, std::vector<net::Socket> sockets, Millis opTimeout);
  ~TcpControlChannel() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "tcp"; }
  void send(int to, const std::string& bytes) override;
  void poll(std::vector<Message>& out, Millis timeout, Micros spin = Micros(0)) override;
  void wakeup() override;

 private:
  struct Peer {
    int rank;
    net::Socket sock;
    std::string in;       // received bytes not yet parsed into whole frames
    std::string address;  // the peer's address ("" unknown)
  };

  Peer& peer(int rank);
  // Reads everything available from p, appending whole messages to out.
  void readAvailable(Peer& p, std::vector<Message>& out);
  // "failed: the host of rank 3 (10.0.0.3) is unreachable: ...; ranks 2, 3 run there; ...".
  std::string unreachable(const Peer& p) const;
  [[noreturn]] void fail(int peer, const std::string& why) const;

  int rank_;
  int size_;
  Millis opTimeout_;
  std::vector<Peer> peers_;
  // True when wakeup() got a call since the poller last looked.
  bool takeWakeups();

  int wakeFd_ = -1;
  std::atomic<uint64_t> wakeups_{0};   // wakeup() calls so far
  std::atomic<bool> mayBlock_{false};  // the poller is in, or about to enter, a blocking poll(2)
  uint64_t seenWakeups_ = 0;           // wakeups_ when the poller last looked (poller only)
  std::vector<Message> stash_;         // messages read while send() waited
};

}  // namespace tcp
}  // namespace hora
