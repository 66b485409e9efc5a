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

TcpControlChannel::TcpControlChannel(int rank, int size, std::vector<net::Socket> sockets,
                                     Millis opTimeout)
    : rank_(rank), size_(size), opTimeout_(opTimeout) {
  // The vector is indexed by world rank and holds invalid sockets for ranks this one has no control
  // connection with; only the real ones become peers.
  for (int r = 0; r < static_cast<int>(sockets.size()); ++r) {
    if (sockets[r].valid()) {
      setLivenessTimeout(sockets[r].fd(), std::min(opTimeout, kUnreachableAfter));
      std::string address = net::peerAddress(sockets[r].fd());
      peers_.push_back({r, std::move(sockets[r]), std::string(), std::move(address)});
    }
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
                        std::to_string(rank) +
                        " (rank 0 talks to every rank, the others only to rank 0)");
}

// Keepalive (or the user timeout) failed p's connection: its host stopped answering. Worded as
// TcpLinks::unreachable() words it for data connections.
std::string TcpControlChannel::unreachable(const Peer& p) const {
  std::string ranks;
  for (const auto& q : peers_) {
    if (!p.address.empty() && q.address == p.address) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(q.rank);
    }
  }
  const auto seconds = std::min(opTimeout_, kUnreachableAfter).count() / 1000;
  return "failed: the host of rank " + std::to_string(p.rank) +
         (p.address.empty() ? "" : " (" + p.address + ")") + " is unreachable: no answer for " +
         std::to_string(seconds) + " s" + (ranks.empty() ? "" : "; ranks " + ranks + " run there") +
         "; the host is down or the network to it is cut";
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
// reads as its hang-up: they are delivered first, and the hang-up fails the next call (the
// socket stays readable at its end).
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
  const size_t before = out.size();
  // Parsing happens before the hang-up is reported, so messages that arrived ahead of it are not
  // lost.
  std::string bad = takeControlMessages(p.rank, p.in, out);
  if (!bad.empty()) fail(p.rank, "sent a malformed frame: " + bad);
  if (!hangUp.empty() && out.size() == before) {
    if (timedOut) fail(p.rank, unreachable(p));
    fail(p.rank, "closed (" + hangUp + "); that rank probably exited or failed, see its log");
  }
}

void TcpControlChannel::send(int to, const std::string& bytes) {
  // The receiver would reject such a frame as malformed and drop the channel; refusing it here
  // makes it the sender's error, with the size in the message.
  if (bytes.size() > kMaxControlMessageBytes) {
    throw InvalidArgument("rank " + std::to_string(rank_) + ": control message of " +
                          std::to_string(bytes.size()) + " bytes exceeds the limit");
  }
  Peer& target = peer(to);
  std::string frame = controlFrame(bytes);
  size_t sent = 0;
  std::vector<pollfd> fds;
  while (sent < frame.size()) {
    net::IoResult r = net::sendSome(target.sock.fd(), frame.data() + sent, frame.size() - sent);
    if (r.status == net::IoStatus::Ok) {
      sent += r.bytes;
      continue;
    }
    if (r.status != net::IoStatus::WouldBlock) {
      if (r.error == ETIMEDOUT) fail(to, unreachable(target));
      fail(to, "closed while sending (" + net::describe(r) + ")");
    }
    // The peer's window is full: wait for room, draining what peers send us meanwhile. Rank 0 and
    // a rank that both send a large message at once would otherwise each wait for the other to
    // read. What arrives here goes to stash_ and is handed out by the next poll(), in order.
    fds.clear();
    fds.push_back({target.sock.fd(), POLLOUT, 0});
    for (auto& p : peers_) fds.push_back({p.sock.fd(), POLLIN, 0});
    // Each wait is bounded by the op timeout, so a peer that stops reading is reported instead of
    // blocking this rank forever.
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(opTimeout_.count()));
    if (rc < 0 && errno != EINTR) fail(to, std::string("poll failed: ") + std::strerror(errno));
    if (rc == 0) {
      throw TimeoutError("rank " + std::to_string(rank_) + ": rank " + std::to_string(to) +
                         " accepted no control data for " + std::to_string(opTimeout_.count()) +
                         " ms");
    }
    for (size_t i = 0; i < peers_.size() && rc > 0; ++i) {
      if (fds[i + 1].revents & POLLIN) readAvailable(peers_[i], stash_);
    }
  }
}

void TcpControlChannel::poll(std::vector<Message>& out, Millis timeout, Micros spin) {
  size_t before = out.size();
  // Messages read while send() waited for room come first: they arrived before anything still in
  // the sockets.
  for (auto& m : stash_) out.push_back(std::move(m));
  stash_.clear();
  auto deadline = timeout.count() < 0 ? Clock::time_point::max() : Clock::now() + timeout;
  std::vector<pollfd> fds;
  fds.push_back({wakeFd_, POLLIN, 0});
  for (auto& p : peers_) fds.push_back({p.sock.fd(), POLLIN, 0});
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
    // Once something arrived, only collect what else is already there.
    woken = woken || takeWakeups();
    bool arrived = woken || out.size() > before;
    int wait = arrived ? 0 : (timeout.count() < 0 ? -1 : net::pollTimeoutMs(deadline));
    if (wait != 0) {
      // Raise the flag, then look at the counter once more: a wakeup() that bumped the counter
      // before it could see the flag is caught here, and any later one writes the eventfd.
      mayBlock_.store(true, std::memory_order_seq_cst);
      if (takeWakeups()) {
        woken = true;
        wait = 0;
      }
    }
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
    for (size_t i = 0; i < peers_.size() && rc > 0; ++i) {
      if (fds[i + 1].revents != 0) readAvailable(peers_[i], out);
    }
    if (woken || out.size() > before) return;
    // poll(2) rounds its timeout to milliseconds and may wake early, so the deadline itself
    // decides.
    if (rc == 0 && timeout.count() >= 0 && Clock::now() >= deadline) return;
  }
}

}  // namespace tcp
}  // namespace hora
