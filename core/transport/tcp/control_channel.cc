// The TCP control channel: negotiation messages between rank 0 and every other rank, on their own
// connections so a collective in progress on the data mesh never reads a control message.
//
// Wire: one frame per message (core/transport/control_frames.h). Frames are the unit of delivery: a
// message is handed to the coordinator only once every byte of it has arrived, and a frame that
// fails validation ends the channel (IoError naming the peer), since a TCP byte stream cannot be
// resynchronised after a bad header.
#include "core/transport/tcp/control_channel.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/common/errors.h"
#include "core/common/spin.h"
#include "core/transport/control_frames.h"

namespace hora {
namespace tcp {
namespace {

// Read granularity: large enough that a burst of responses takes a few syscalls, small enough
// that an idle channel does not hold much unused buffer.
constexpr size_t kReadChunk = 64 << 10;

}  // namespace

// Kernel keepalive rather than heartbeats: probes cost the application nothing, they work while
// the background thread sleeps in poll(2) with no timer, and the protocol stays as it is. A
// stopped process still answers probes (its kernel does); only a crashed host or a cut network
// goes silent, which is what an idle connection must notice. Idle T/2, then probes every T/8,
// four unanswered ones end it: about T in all. TCP_USER_TIMEOUT bounds unacknowledged sends.
void setLivenessTimeout(int fd, Millis timeout) {
  // Only TCP has keepalive; a local socket pair (tests, fuzzing) has no network to go silent.
  int domain = 0;
  socklen_t length = sizeof(domain);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0 && domain != AF_INET &&
      domain != AF_INET6) {
    return;
  }
  int seconds = static_cast<int>(std::max<int64_t>(2, timeout.count() / 1000));
  int idle = std::max(1, seconds / 2), interval = std::max(1, seconds / 8), count = 4;
  unsigned int userTimeoutMs = static_cast<unsigned int>(std::max<int64_t>(1000, timeout.count()));
  int one = 1;
  bool ok =
      setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) == 0 &&
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) == 0 &&
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval)) == 0 &&
      setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count)) == 0 &&
      setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &userTimeoutMs, sizeof(userTimeoutMs)) == 0;
  if (!ok) {
    throw IoError(std::string("cannot set keepalive options on a control connection: ") +
                  std::strerror(errno));
  }
}

std::string unreachableHostText(int rank, const std::string& address,
                                const std::vector<std::string>& hosts, Millis after,
                                const std::string& during) {
  std::string ranks;
  // Addresses hold the host only, not the port, so equal addresses mean the same host.
  for (size_t r = 0; r < hosts.size() && !address.empty(); ++r) {
    if (hosts[r] == address) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  }
  return "the host of rank " + std::to_string(rank) +
         (address.empty() ? "" : " (" + address + ")") + " is unreachable: no answer for " +
         std::to_string(after.count() / 1000) + " s" + during +
         (ranks.empty() ? "" : "; ranks " + ranks + " run there") +
         "; the host is down or the network to it is cut";
}

TcpControlChannel::TcpControlChannel(int rank, int size, std::vector<net::Socket> sockets,
                                     Millis opTimeout, int fanout, std::vector<std::string> hosts)
    : rank_(rank),
      size_(size),
      opTimeout_(opTimeout),
      tree_(size, fanout),
      hosts_(std::move(hosts)) {
  // The vector is indexed by world rank and holds invalid sockets for ranks this one has no control
  // connection with; only the real ones become peers.
  for (int r = 0; r < static_cast<int>(sockets.size()); ++r) {
    if (sockets[r].valid()) {
      setLivenessTimeout(sockets[r].fd(), std::min(opTimeout, kUnreachableAfter));
      Peer p;
      p.rank = r;
      p.sock = std::move(sockets[r]);
      p.address = net::peerAddress(p.sock.fd());
      peers_.push_back(std::move(p));
    }
  }
  // A peer's address as its connection shows it wins over the published one, so its own host
  // always matches; without the job's table, the peers' addresses are all this rank knows.
  hosts_.resize(static_cast<size_t>(std::max(size, 0)));
  for (const auto& p : peers_) {
    if (p.rank < size && !p.address.empty()) hosts_[p.rank] = p.address;
  }
  // wakeup() may come from any thread while the background thread sleeps in poll(2): an eventfd
  // in the same poll set ends that sleep without a lock or a timeout tick.
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) {
    throw IoError("rank " + std::to_string(rank) +
                  ": cannot create eventfd: " + std::strerror(errno));
  }
}

TcpControlChannel::~TcpControlChannel() {
  if (wakeFd_ >= 0) ::close(wakeFd_);
}

TcpControlChannel::Peer& TcpControlChannel::peer(int rank) {
  for (auto& p : peers_) {
    if (p.rank == rank) return p;
  }
  throw InvalidArgument("rank " + std::to_string(rank_) + ": no control connection to rank " +
                        std::to_string(rank));
}

std::string TcpControlChannel::relays(int peer) const {
  // Messages between rank 0 and a worker pass every ancestor of the worker but rank 0.
  int worker = rank_ == 0 ? peer : rank_;
  if (worker <= 0 || worker >= size_) return "";
  std::string out;
  for (int r = tree_.parent(worker); r > 0; r = tree_.parent(r)) {
    out = std::to_string(r) + (out.empty() ? "" : ", ") + out;
  }
  return out;
}

TcpControlChannel::Peer& TcpControlChannel::link(int rank) {
  int child = tree_.childToward(rank_, rank);
  return peer(child >= 0 ? child : tree_.parent(rank_));
}

// Keepalive (or the user timeout) failed p's connection: its host stopped answering. Worded as
// TcpLinks::unreachable() words it for data connections.
std::string TcpControlChannel::unreachable(const Peer& p) const {
  return "failed: " +
         unreachableHostText(p.rank, p.address, hosts_, std::min(opTimeout_, kUnreachableAfter));
}

void TcpControlChannel::stalled(int peer) const {
  throw TimeoutError("rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                     " accepted no control data for " + std::to_string(opTimeout_.count()) + " ms");
}

void TcpControlChannel::fail(int peer, const std::string& why) const {
  throw IoError("rank " + std::to_string(rank_) + ": control connection to rank " +
                std::to_string(peer) + " " + why);
}

// The count tells a polling poller; the eventfd is written only when the poller may be blocked
// in poll(2), because that write (a system call, and a wake-up when someone sleeps) is most of a
// submit's cost in the engine. Both sides use sequentially consistent operations in opposite
// order (count then flag here, flag then count in poll()), so at least one of them sees the
// other: either the poller does not block, or it gets the eventfd.
void TcpControlChannel::wakeup() {
  wakeups_.fetch_add(1, std::memory_order_seq_cst);
  if (!mayBlock_.load(std::memory_order_seq_cst)) return;
  uint64_t one = 1;
  ssize_t ignored = ::write(wakeFd_, &one, sizeof(one));
  (void)ignored;
}

bool TcpControlChannel::takeWakeups() {
  uint64_t now = wakeups_.load(std::memory_order_seq_cst);
  // Only the poller reads and writes seenWakeups_, so comparing counts needs no lock and loses no
  // wakeup.
  if (now == seenWakeups_) return false;
  seenWakeups_ = now;
  return true;
}

// Reads what p's socket holds now and appends every complete frame to out; a partial frame stays
// in p.in for the next call. A peer's last messages (its shutdown, say) can arrive in the same
// reads as its hang-up: they are delivered (or passed on) first, and the hang-up is kept in
// p.hangUp for failIfHungUp(), once those are handed out and written.
void TcpControlChannel::readAvailable(Peer& p, std::vector<Message>& out) {
  std::string hangUp;
  bool timedOut = false;
  for (;;) {
    size_t old = p.in.size();
    p.in.resize(old + kReadChunk);
    net::IoResult r = net::recvSome(p.sock.fd(), &p.in[old], kReadChunk);
    p.in.resize(old + r.bytes);
    if (r.status == net::IoStatus::WouldBlock) break;
    if (r.status != net::IoStatus::Ok) {
      hangUp = net::describe(r);
      timedOut = r.error == ETIMEDOUT;
      break;
    }
    if (r.bytes < kReadChunk) break;  // drained for now; saves a syscall returning EAGAIN
  }
  // Parsing happens before the hang-up is reported, so messages that arrived ahead of it are
  // delivered (or passed on) first.
  std::vector<ControlFrame> frames;
  std::string bad = takeControlFrames(p.in, frames);
  for (auto& f : frames) route(p, f, out);
  if (!bad.empty()) fail(p.rank, "sent a malformed frame: " + bad);
  if (!hangUp.empty()) {
    p.hangUp = timedOut
                   ? unreachable(p)
                   : "closed (" + hangUp + "); that rank probably exited or failed, see its log";
  }
}

// A relay whose parent hung up right after its last messages (a shutdown) still passes them on
// before it fails, so a hang-up fails only a call with nothing else to do.
void TcpControlChannel::failIfHungUp() const {
  for (const auto& p : peers_) {
    if (!p.hangUp.empty()) fail(p.rank, p.hangUp);
  }
}

// A frame from p: a direct one is from p to this rank; a routed one from a child names its
// origin, from the parent its destination; a subtree one is rank 0's for every rank below.
void TcpControlChannel::route(Peer& p, ControlFrame& f, std::vector<Message>& out) {
  const bool fromParent = p.rank == tree_.parent(rank_);
  switch (f.type) {
    case ControlFrameType::Direct: out.push_back({p.rank, std::move(f.message)}); return;
    case ControlFrameType::Routed:
      if (!fromParent) {
        // Only ranks of p's subtree send through p.
        if (!tree_.inSubtree(p.rank, f.rank)) {
          fail(p.rank, "sent a malformed frame: origin rank " + std::to_string(f.rank) +
                           " is not below it");
        }
        if (rank_ == 0) {
          out.push_back({f.rank, std::move(f.message)});
        } else {
          enqueue(peer(tree_.parent(rank_)), f.wire);
        }
        return;
      }
      if (f.rank == rank_) {
        out.push_back({0, std::move(f.message)});
        return;
      }
      if (tree_.childToward(rank_, f.rank) < 0) {
        fail(p.rank, "sent a malformed frame: destination rank " + std::to_string(f.rank) +
                         " is not below rank " + std::to_string(rank_));
      }
      enqueue(link(f.rank), f.wire);
      return;
    case ControlFrameType::Subtree:
      if (!fromParent) fail(p.rank, "sent a malformed frame: a broadcast from below");
      for (int c : tree_.children(rank_)) enqueue(peer(c), f.wire);
      out.push_back({0, std::move(f.message)});
      return;
  }
}

uint64_t TcpControlChannel::enqueue(Peer& p, const std::string& frame) {
  // A connection that failed takes nothing more; its read side reports it (failIfHungUp), or
  // drainTo() does for this rank's own message.
  if (!p.writeFailed.empty()) return p.queued;
  if (p.outSent == p.out.size()) {
    p.out.clear();
    p.outSent = 0;
    p.stalledSince = Clock::now();
  }
  p.out += frame;
  p.queued += frame.size();
  flush(p);
  return p.queued;
}

// Writes what the socket takes now; the rest waits for POLLOUT (poll(), drainTo()). A failed
// write does not throw here: a relay passing a child's frame up to a parent that just closed
// (after its last messages, a shutdown) must still hand those messages to its caller. The failure
// is kept; the socket, now in error, fails the next read (failIfHungUp), and drainTo() reports
// it at once for this rank's own message.
void TcpControlChannel::flush(Peer& p) {
  while (p.outSent < p.out.size()) {
    net::IoResult r =
        net::sendSome(p.sock.fd(), p.out.data() + p.outSent, p.out.size() - p.outSent);
    if (r.status == net::IoStatus::WouldBlock) return;
    if (r.status != net::IoStatus::Ok) {
      p.writeFailed =
          r.error == ETIMEDOUT ? unreachable(p) : "closed while sending (" + net::describe(r) + ")";
      break;
    }
    p.outSent += r.bytes;
    p.written += r.bytes;
    p.stalledSince = Clock::now();
  }
  p.out.clear();
  p.outSent = 0;
}

bool TcpControlChannel::pendingOutput() const {
  for (const auto& p : peers_) {
    if (p.outSent < p.out.size()) return true;
  }
  return false;
}

void TcpControlChannel::pollSet(std::vector<pollfd>& fds) const {
  fds.clear();
  fds.push_back({wakeFd_, POLLIN, 0});
  for (const auto& p : peers_) {
    // A peer that hung up stays readable at its end: it is left out, but for what is still to
    // be written to it (whose failure then names it).
    const bool writing = p.outSent < p.out.size();
    short events = p.hangUp.empty() ? POLLIN : 0;
    if (writing) events |= POLLOUT;
    fds.push_back({events != 0 ? p.sock.fd() : -1, events, 0});
  }
}

void TcpControlChannel::serve(const std::vector<pollfd>& fds, std::vector<Message>& out) {
  const auto now = Clock::now();
  for (size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    const short revents = fds[i + 1].revents;
    if (p.hangUp.empty() && (revents & (POLLIN | POLLHUP | POLLERR))) readAvailable(p, out);
    if (p.outSent < p.out.size() && (revents & POLLOUT)) flush(p);
    // Each wait is bounded by the op timeout, so a peer that stops reading is reported instead of
    // holding this rank (and what it relays) forever.
    if (p.outSent < p.out.size() && now - p.stalledSince >= opTimeout_) {
      stalled(p.rank);
    }
  }
}

void TcpControlChannel::send(int to, const std::string& bytes) {
  // The receiver would reject such a frame as malformed and drop the channel; refusing it here
  // makes it the sender's error, with the size in the message.
  if (bytes.size() > kMaxControlMessageBytes) {
    throw InvalidArgument("rank " + std::to_string(rank_) + ": control message of " +
                          std::to_string(bytes.size()) + " bytes exceeds the limit");
  }
  if (to == rank_ || to < 0 || to >= size_ || (rank_ != 0 && to != 0)) {
    throw InvalidArgument("rank " + std::to_string(rank_) + ": no control connection to rank " +
                          std::to_string(to) +
                          " (rank 0 talks to every rank, the others only to rank 0)");
  }
  Peer& target = link(to);
  // A message that crosses one link only travels as in a star; a relayed one names the rank the
  // relays need: its destination going down, its origin going up.
  const bool oneHop = target.rank == to && (to == 0 || rank_ == 0);
  std::string frame =
      oneHop ? controlFrame(bytes) : routedControlFrame(rank_ == 0 ? to : rank_, bytes);
  drainTo(target, enqueue(target, frame));
}

void TcpControlChannel::broadcast(const std::string& bytes, bool bestEffort) {
  if (rank_ != 0) throw InvalidArgument("only rank 0 broadcasts on the control channel");
  if (bytes.size() > kMaxControlMessageBytes) {
    throw InvalidArgument("rank 0: control message of " + std::to_string(bytes.size()) +
                          " bytes exceeds the limit");
  }
  // A leaf child gets the star's frame; a relay the subtree frame it passes on.
  const std::string direct = controlFrame(bytes), subtree = subtreeControlFrame(bytes);
  for (auto& p : peers_) {
    try {
      drainTo(p, enqueue(p, tree_.hasChildren(p.rank) ? subtree : direct));
    } catch (const std::exception&) {
      if (!bestEffort) throw;  // else that subtree is gone too
    }
  }
}

// Waits until p has taken `until` bytes. Meanwhile it reads what peers send, so two ranks sending
// to each other never deadlock: messages for this rank go to stash_ (poll() hands them out
// first, in order), the others are relayed.
void TcpControlChannel::drainTo(Peer& p, uint64_t until) {
  std::vector<pollfd> fds;
  while (p.written < until) {
    if (!p.writeFailed.empty()) fail(p.rank, p.writeFailed);
    pollSet(fds);
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(opTimeout_.count()));
    if (rc < 0 && errno != EINTR) {
      fail(p.rank, std::string("poll failed: ") + std::strerror(errno));
    }
    if (rc == 0) stalled(p.rank);
    if (rc > 0) serve(fds, stash_);
  }
}

// How long poll(2) may sleep: until the deadline (forever when there is none), but while relayed
// frames wait to be written, no longer than the op timeout of the stalest of them allows.
int TcpControlChannel::waitMs(bool settled, Clock::time_point deadline) const {
  Clock::time_point until = settled ? Clock::time_point::min() : deadline;
  bool pending = false;
  for (const auto& p : peers_) {
    if (p.outSent == p.out.size()) continue;
    // The first pending peer replaces the deadline: the wait now ends on POLLOUT or the stall.
    until = pending ? std::min(until, p.stalledSince + opTimeout_) : p.stalledSince + opTimeout_;
    pending = true;
  }
  if (until == Clock::time_point::max()) return -1;
  return until <= Clock::now() ? 0 : net::pollTimeoutMs(until);
}

void TcpControlChannel::poll(std::vector<Message>& out, Millis timeout, Micros spin) {
  size_t before = out.size();
  // Messages read while send() waited for room come first: they arrived before anything still in
  // the sockets.
  for (auto& m : stash_) out.push_back(std::move(m));
  stash_.clear();
  auto deadline = timeout.count() < 0 ? Clock::time_point::max() : Clock::now() + timeout;
  std::vector<pollfd> fds;
  pollSet(fds);
  // A wakeup() that came before this call ends it without sleeping, like one that comes during it.
  bool woken = takeWakeups();
  if (out.size() == before && !woken && timeout.count() != 0) {
    // Poll without sleeping first (core/common/spin.h); the loop below takes in what is there.
    Micros budget = timeout.count() < 0 ? spin : std::min<Micros>(spin, timeout);
    spinUntil(budget, [&] {
      return wakeups_.load(std::memory_order_relaxed) != seenWakeups_ ||
             ::poll(fds.data(), fds.size(), 0) != 0;
    });
  }
  for (;;) {
    // Once something arrived, only collect what else is already there (and write what this rank
    // relays: its caller may next wait on ranks that wait for those frames).
    woken = woken || takeWakeups();
    if (!woken && out.size() == before && !pendingOutput()) failIfHungUp();
    int wait = waitMs(woken || out.size() > before, deadline);
    if (wait != 0) {
      // Raise the flag, then look at the counter once more: a wakeup() that bumped the counter
      // before it could see the flag is caught here, and any later one writes the eventfd.
      mayBlock_.store(true, std::memory_order_seq_cst);
      if (takeWakeups()) {
        woken = true;
        wait = waitMs(true, deadline);
      }
    }
    pollSet(fds);
    int rc = ::poll(fds.data(), fds.size(), wait);
    // Relaxed is enough: a wakeup() that still sees the flag raised only writes the eventfd once
    // too often, and the next poll drains it.
    mayBlock_.store(false, std::memory_order_relaxed);
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw IoError("rank " + std::to_string(rank_) + ": poll failed: " + std::strerror(errno));
    }
    if (rc > 0 && fds[0].revents != 0) {
      // Drain the eventfd, or it would stay readable and end every later poll at once.
      uint64_t count;
      ssize_t ignored = ::read(wakeFd_, &count, sizeof(count));
      (void)ignored;
    }
    // A wakeup() that came while the flag was down only bumped the counter; look again.
    woken = woken || takeWakeups();
    serve(fds, out);
    if (pendingOutput()) continue;
    if (woken || out.size() > before) return;
    failIfHungUp();
    // poll(2) rounds its timeout to milliseconds and may wake early, so the deadline itself
    // decides.
    if (timeout.count() >= 0 && Clock::now() >= deadline) return;
  }
}

}  // namespace tcp
}  // namespace hora
