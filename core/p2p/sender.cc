// Sender (contract in sender.h).
//
// A message goes out as one gathered write of its header and payload (sendmsg with two iovecs),
// so a small message is one segment and a large one needs no staging copy.
#include "core/p2p/sender.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>

#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/net/handshake.h"
#include "core/p2p/message_header.h"

namespace hora {
namespace p2p {
namespace {

constexpr Millis kFirstRetry{10};
constexpr Millis kMaxRetry{500};

std::string seconds(Millis timeout) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", static_cast<double>(timeout.count()) / 1000.0);
  return text;
}

// The peer never writes on a connection this rank opened, so anything readable is its end (EOF,
// reset) or garbage: either way the connection is finished.
bool peerHungUp(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

}  // namespace

struct Sender::Peer {
  std::mutex mutex;
  std::condition_variable idle;
  bool busy = false;  // guarded by mutex: a send holds the connection (see Turn)
  // Used only by the send that holds the turn.
  net::Socket sock;
  std::string failure;  // why the connection is finished for good
};

// One send's hold on a peer's connection: sends to one rank take turns, so each message is
// written whole. Waiting for the turn ends at the send's own deadline, so a send queued behind a
// stuck one still times out on time. (A flag under a plain mutex rather than a timed mutex: the
// turn's hand-over is then visible to ThreadSanitizer too.)
class Sender::Turn {
 public:
  Turn(Peer& peer, Clock::time_point deadline) : peer_(peer) {
    std::unique_lock<std::mutex> lock(peer.mutex);
    auto idle = [&peer] { return !peer.busy; };
    if (deadline == Clock::time_point::max()) {
      peer.idle.wait(lock, idle);
    } else if (!peer.idle.wait_until(lock, deadline, idle)) {
      return;
    }
    peer.busy = true;
    held_ = true;
  }
  ~Turn() {
    if (!held_) return;
    std::lock_guard<std::mutex> lock(peer_.mutex);
    peer_.busy = false;
    peer_.idle.notify_one();
  }
  Turn(const Turn&) = delete;
  Turn& operator=(const Turn&) = delete;
  bool held() const { return held_; }

 private:
  Peer& peer_;
  bool held_ = false;
};

Sender::Sender(int rank, int size, const std::string& secret)
    : rank_(rank), size_(size), secret_(secret) {
  interruptFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (interruptFd_ < 0) {
    throw IoError(me() + ": cannot create an eventfd for the point-to-point channel: " +
                  std::strerror(errno));
  }
  for (int i = 0; i < size; ++i) peers_.push_back(std::make_unique<Peer>());
}

Sender::~Sender() {
  interrupt();
  closeConnections();
  ::close(interruptFd_);
}

void Sender::setPeers(const std::vector<std::string>& addresses) {
  if (static_cast<int>(addresses.size()) != size_) {
    throw InvalidArgument(me() + ": set_peers needs one address per rank (" +
                          std::to_string(size_) + "), got " + std::to_string(addresses.size()));
  }
  for (size_t i = 0; i < addresses.size(); ++i) {
    std::string host;
    int port = 0;
    try {
      net::parseHostPort(addresses[i], &host, &port);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(me() + ": the address of rank " + std::to_string(i) + ": " + e.what());
    }
  }
  std::lock_guard<std::mutex> lock(addressesMutex_);
  if (!addresses_.empty() && addresses_ != addresses) {
    throw InvalidArgument(me() +
                          ": set_peers was already called with other addresses (the peers "
                          "of a channel are set once)");
  }
  addresses_ = addresses;
}

void Sender::interrupt() {
  if (interrupted_.exchange(true)) return;
  uint64_t one = 1;
  ssize_t ignored = ::write(interruptFd_, &one, sizeof(one));
  (void)ignored;
}

void Sender::closeConnections() {
  for (auto& peer : peers_) {
    Turn turn(*peer, Clock::time_point::max());
    peer->sock.reset();
  }
}

void Sender::interrupted(const std::string& what) const {
  throw ShutdownError(what + ": the point-to-point channel was closed");
}

Sender::Wait Sender::waitReady(int fd, short events, Clock::time_point deadline) const {
  for (;;) {
    pollfd fds[2] = {{interruptFd_, POLLIN, 0}, {fd, events, 0}};
    int rc = ::poll(fds, fd >= 0 ? 2 : 1, net::pollTimeoutMs(deadline));
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw IoError(me() + ": poll failed: " + std::strerror(errno));
    }
    if (fds[0].revents != 0) return Wait::Interrupted;
    if (rc > 0) return Wait::Ready;
    if (Clock::now() >= deadline) return Wait::TimedOut;
  }
}

void Sender::send(const void* data, size_t bytes, int dst, int64_t tag, Clock::time_point deadline,
                  Millis timeout) {
  std::string what = me() + ": send to rank " + std::to_string(dst) + " with tag " +
                     std::to_string(tag) + " (" + std::to_string(bytes) + " bytes)";
  std::string after = "after " + seconds(timeout);
  Peer& peer = *peers_[dst];
  Turn turn(peer, deadline);
  if (!turn.held()) {
    throw TimeoutError(what + " timed out " + after + " waiting for earlier sends to rank " +
                       std::to_string(dst) + " (is rank " + std::to_string(dst) +
                       " alive and receiving?)");
  }
  if (interrupted_) interrupted(what);
  if (!peer.failure.empty()) throw IoError(what + ": " + peer.failure);
  if (!peer.sock.valid()) connect(peer, dst, deadline, what, after);
  if (peerHungUp(peer.sock.fd())) {
    peer.failure = "rank " + std::to_string(dst) + " closed its point-to-point connection";
    peer.sock.shutdownBoth();
    throw IoError(what + ": " + peer.failure + " (did rank " + std::to_string(dst) +
                  " exit or close its channel?)");
  }
  write(peer, data, bytes, dst, tag, deadline, what, after);
}

void Sender::connect(Peer& peer, int dst, Clock::time_point deadline, const std::string& what,
                     const std::string& after) {
  std::string address;
  {
    std::lock_guard<std::mutex> lock(addressesMutex_);
    if (addresses_.empty()) {
      throw InvalidArgument(what +
                            " before set_peers(): give the channel every rank's address "
                            "first");
    }
    address = addresses_[dst];
  }
  std::string host;
  int port = 0;
  net::parseHostPort(address, &host, &port);
  Millis backoff = kFirstRetry;
  std::string lastError = "no attempt finished";
  for (;;) {
    if (interrupted_) interrupted(what);
    bool pending = false;
    int err = 0;
    net::Socket s;
    try {
      s = net::startConnect(host, port, &pending, &err);
    } catch (const IoError& e) {
      throw IoError(what + ": cannot connect to rank " + std::to_string(dst) + " at " + address +
                    ": " + e.what());
    }
    if (s.valid() && pending) {
      Wait w = waitReady(s.fd(), POLLOUT, deadline);
      if (w == Wait::Interrupted) interrupted(what);
      err = w == Wait::Ready ? net::connectResult(s.fd()) : ETIMEDOUT;
    }
    if (s.valid() && err == 0) {
      if (handshake(peer, s, dst, deadline, what, &lastError)) {
        peer.sock = std::move(s);
        HORA_LOG(Debug, me() << ": point-to-point connection to rank " << dst << " at " << address
                             << " ready");
        return;
      }
    } else {
      lastError = std::strerror(err);
    }
    // Refused or unreachable: the peer may still be starting. Back off, within the deadline.
    auto now = Clock::now();
    if (now >= deadline || deadline - now <= backoff) {
      throw TimeoutError(what + " timed out " + after + ": could not connect to rank " +
                         std::to_string(dst) + " at " + address + " (last error: " + lastError +
                         "; is rank " + std::to_string(dst) +
                         " running, and is that its address()?)");
    }
    if (waitReady(-1, 0, now + backoff) == Wait::Interrupted) interrupted(what);
    backoff = std::min(backoff * 2, kMaxRetry);
  }
}

// True once authenticated. False (with *error) when the connection broke during the handshake,
// which is worth a retry. A handshake that failed is final: it throws.
bool Sender::handshake(Peer& peer, net::Socket& sock, int dst, Clock::time_point deadline,
                       const std::string& what, std::string* error) {
  net::Handshake hs = net::Handshake::connector(secret_, net::PeerKind::P2p, rank_, dst);
  char buf[256];
  while (hs.state() == net::Handshake::State::Running || hs.outputPending() > 0) {
    bool writing = hs.outputPending() > 0;
    net::IoResult r = writing
                          ? net::sendSome(sock.fd(), hs.outputData(), hs.outputPending())
                          : net::recvSome(sock.fd(), buf, std::min(sizeof(buf), hs.inputWanted()));
    if (r.status == net::IoStatus::Ok) {
      if (writing) {
        hs.outputSent(r.bytes);
      } else {
        hs.input(buf, r.bytes);
      }
      continue;
    }
    if (r.status == net::IoStatus::WouldBlock) {
      Wait w = waitReady(sock.fd(), writing ? POLLOUT : POLLIN, deadline);
      if (w == Wait::Interrupted) interrupted(what);
      if (w == Wait::TimedOut) {
        *error = "the handshake did not finish";
        return false;
      }
      continue;
    }
    if (hs.state() == net::Handshake::State::Failed) break;
    *error = net::describe(r) + " during the handshake";
    return false;
  }
  if (hs.state() == net::Handshake::State::Done) return true;
  peer.failure = "rank " + std::to_string(dst) + " did not accept the connection: " + hs.failure();
  throw IoError(what + ": " + peer.failure);
}

void Sender::write(Peer& peer, const void* data, size_t bytes, int dst, int64_t tag,
                   Clock::time_point deadline, const std::string& what, const std::string& after) {
  uint8_t header[kMessageHeaderBytes];
  MessageHeader h;
  h.tag = tag;
  h.length = bytes;
  encodeMessageHeader(h, header);
  iovec parts[2] = {{header, sizeof(header)}, {const_cast<void*>(data), bytes}};
  size_t total = sizeof(header) + bytes;
  size_t sent = 0;
  int first = 0;  // the first iovec with bytes left
  while (sent < total) {
    msghdr msg{};
    msg.msg_iov = parts + first;
    msg.msg_iovlen = 2 - first;
    ssize_t n = ::sendmsg(peer.sock.fd(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      size_t moved = static_cast<size_t>(n);
      while (first < 2 && moved >= parts[first].iov_len) {
        moved -= parts[first].iov_len;
        ++first;
      }
      if (first < 2) {
        parts[first].iov_base = static_cast<uint8_t*>(parts[first].iov_base) + moved;
        parts[first].iov_len -= moved;
      }
      continue;
    }
    int err = n < 0 ? errno : 0;
    if (n < 0 && err == EINTR) continue;
    if (n < 0 && (err == EAGAIN || err == EWOULDBLOCK)) {
      Wait w = waitReady(peer.sock.fd(), POLLOUT, deadline);
      if (w == Wait::Ready) continue;
      if (sent > 0) {
        // Half a message is on the wire: the stream cannot carry another one.
        peer.failure = "an earlier send to rank " + std::to_string(dst) +
                       " stopped part-way through a message, which closed the connection";
        peer.sock.shutdownBoth();
      }
      if (w == Wait::Interrupted) interrupted(what);
      throw TimeoutError(
          what + " timed out " + after + " with " + std::to_string(sent) + " of " +
          std::to_string(total) + " bytes written: rank " + std::to_string(dst) +
          " is not taking data (is it alive?)" +
          (sent > 0 ? "; the connection to it is closed, so later sends to it fail" : ""));
    }
    net::IoResult r{net::IoStatus::Failed, 0, err};
    if (err == EPIPE || err == ECONNRESET || err == ENOTCONN) r.status = net::IoStatus::Closed;
    peer.failure = "rank " + std::to_string(dst) + " closed its point-to-point connection (" +
                   net::describe(r) + ")";
    peer.sock.shutdownBoth();
    throw IoError(what + ": " + peer.failure + " (did rank " + std::to_string(dst) +
                  " exit or close its channel?)");
  }
}

}  // namespace p2p
}  // namespace hora
