#pragma once
// TcpControlChannel: ControlChannel (see core/transport/control_channel.h) over the tree of
// control connections made by the mesh (control_tree.h): each rank holds one socket to its parent
// and one per child. Up to HORA_CONTROL_FANOUT + 1 ranks that is a star around rank 0.
//
// Routing: a worker's message to rank 0 goes up through its ancestors, rank 0's message to a rank
// down the one child subtree that holds it, and a broadcast goes once down every link; frames a
// rank passes on carry their origin or destination (control_frames.h), so every message arrives
// with `from` = the rank that sent it, in order per sender. Relaying happens inside poll() and
// send(): each link has a queue of frames to write, and poll() returns only once every relayed
// frame is written (within the op timeout), so a relay's caller never sits on its children's news.
// A rank hands its caller only the messages meant for it.
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
#include <poll.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/time.h"
#include "core/net/socket.h"
#include "core/transport/control_channel.h"
#include "core/transport/control_frames.h"
#include "core/transport/tcp/control_tree.h"

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

// "the host of rank 3 (10.0.0.3) is unreachable: no answer for 8 s; ranks 2, 3 run there; ...":
// the ranks are those whose entry of `hosts` (by world rank) is `address`. `during` follows the
// seconds (" while sending during allreduce" for a data link; "" on the control channel).
std::string unreachableHostText(int rank, const std::string& address,
                                const std::vector<std::string>& hosts, Millis after,
                                const std::string& during = "");

class TcpControlChannel : public ControlChannel {
 public:
  // sockets: indexed by world rank, as MeshSockets::control: this rank's parent and children in
  // the tree of `fanout`. hosts: every rank's host by world rank ("" unknown), to name the ranks
  // of an unreachable host beyond this rank's own peers; empty: its peers' addresses only.
  TcpControlChannel(int rank, int size, std::vector<net::Socket> sockets, Millis opTimeout,
                    int fanout = kDefaultControlFanout, std::vector<std::string> hosts = {});
  ~TcpControlChannel() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "tcp"; }
  void send(int to, const std::string& bytes) override;
  // Rank 0: one copy per child; each relay keeps one and passes it on to its own children.
  void broadcast(const std::string& bytes, bool bestEffort = false) override;
  void poll(std::vector<Message>& out, Millis timeout, Micros spin = Micros(0)) override;
  void wakeup() override;
  std::string relays(int peer) const override;

  // The control connections this rank holds (its parent and children).
  int connections() const { return static_cast<int>(peers_.size()); }

 private:
  struct Peer {
    int rank;
    net::Socket sock;
    std::string in;       // received bytes not yet parsed into whole frames
    std::string address;  // the peer's address ("" unknown)
    std::string out;      // frames queued for the peer; out[0, outSent) is written
    size_t outSent = 0;
    uint64_t queued = 0, written = 0;  // bytes ever queued and written, for send() to wait on
    Clock::time_point stalledSince;    // since when queued bytes made no progress
    std::string hangUp;                // why reading it ended ("" open), see failIfHungUp()
    std::string writeFailed;  // why writing to it failed ("" never): what is queued is dropped
  };

  Peer& peer(int rank);
  Peer& link(int rank);  // the peer toward `rank`: its child subtree, else the parent
  // Reads everything available from p: whole messages for this rank go to out, the others to
  // the queue of the link they travel on.
  void readAvailable(Peer& p, std::vector<Message>& out);
  void route(Peer& p, ControlFrame& f, std::vector<Message>& out);
  // Queues a frame for p and writes what the socket takes now; returns the byte count at which
  // the frame is written (Peer::written).
  uint64_t enqueue(Peer& p, const std::string& frame);
  void flush(Peer& p);
  // Writes p's queue up to `until` bytes, reading (into stash_) and relaying meanwhile. Throws
  // TimeoutError when the peer takes nothing for the op timeout.
  void drainTo(Peer& p, uint64_t until);
  // The poll(2) set: eventfd first, then every peer (POLLOUT too while its queue is not empty).
  void pollSet(std::vector<pollfd>& fds) const;
  // Handles one poll(2) result for every peer: reads, writes, and the stall bound.
  void serve(const std::vector<pollfd>& fds, std::vector<Message>& out);
  bool pendingOutput() const;
  void failIfHungUp() const;  // throws IoError for the first peer that hung up
  int waitMs(bool settled, Clock::time_point deadline) const;
  // "failed: the host of rank 3 (10.0.0.3) is unreachable: ...; ranks 2, 3 run there; ...".
  std::string unreachable(const Peer& p) const;
  [[noreturn]] void fail(int peer, const std::string& why) const;
  // TimeoutError: `peer` took none of what this rank writes to it for the op timeout.
  [[noreturn]] void stalled(int peer) const;

  int rank_;
  int size_;
  Millis opTimeout_;
  ControlTree tree_;
  std::vector<std::string> hosts_;  // by world rank; the peers' entries from their connections
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
