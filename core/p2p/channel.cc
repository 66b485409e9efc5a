// Channel (contract in channel.h): argument checks, deadlines and the order of close(); the work
// is in the Mailbox (matching), the Receiver (I/O thread) and the Sender (connections, writes).
#include "core/p2p/channel.h"

#include <cstdio>

#include "core/common/errors.h"
#include "core/net/socket.h"

namespace hora {
namespace p2p {
namespace {

int checkedSize(int rank, int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidArgument("point-to-point channel: rank " + std::to_string(rank) +
                          " is not a rank of a job of " + std::to_string(size) + " ranks");
  }
  return size;
}

bool everyInterface(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "*";
}

std::string bindHostFor(const std::string& listenHost) {
  return everyInterface(listenHost) ? "" : net::advertisedHost(listenHost);
}

Clock::time_point deadlineAfter(Millis timeout) {
  auto now = Clock::now();
  if (timeout >= std::chrono::duration_cast<Millis>(Clock::time_point::max() - now)) {
    return Clock::time_point::max();
  }
  return now + timeout;
}

std::string seconds(Millis timeout) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g s", static_cast<double>(timeout.count()) / 1000.0);
  return text;
}

}  // namespace

// One send or recv in progress: refused once the channel is closed, and counted so close() can
// wait for the last one to leave.
class Channel::Call {
 public:
  Call(Channel& c, const std::string& what) : c_(c) {
    std::lock_guard<std::mutex> lock(c_.callsMutex_);
    if (c_.closed_) throw ShutdownError(what + ": the point-to-point channel is closed");
    ++c_.activeCalls_;
  }
  ~Call() {
    std::lock_guard<std::mutex> lock(c_.callsMutex_);
    if (--c_.activeCalls_ == 0) c_.callsDone_.notify_all();
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

 private:
  Channel& c_;
};

Channel::Channel(int rank, int size, const std::string& secret, const std::string& listenHost)
    : rank_(rank),
      size_(checkedSize(rank, size)),
      mailbox_(rank, size),
      sender_(rank, size, secret),
      receiver_(rank, size, secret, bindHostFor(listenHost), mailbox_) {
  address_ = net::joinHostPort(net::advertisedHost(everyInterface(listenHost) ? "" : listenHost),
                               receiver_.port());
}

Channel::~Channel() { close(); }

void Channel::setPeers(const std::vector<std::string>& addresses) { sender_.setPeers(addresses); }

void Channel::checkPeer(int peer, const char* doing) const {
  if (peer == rank_) {
    throw InvalidArgument(me() + ": cannot " + doing + " rank " + std::to_string(peer) +
                          ", which is this rank (point-to-point messages go between two ranks)");
  }
  if (peer < 0 || peer >= size_) {
    throw InvalidArgument(me() + ": cannot " + doing + " rank " + std::to_string(peer) +
                          ": not a rank of this job of " + std::to_string(size_) + " ranks");
  }
}

void Channel::send(const void* data, size_t bytes, int dst, int64_t tag, Millis timeout) {
  checkPeer(dst, "send to");
  if (timeout.count() < 0) throw InvalidArgument(me() + ": a send timeout must be >= 0");
  Call call(*this,
            me() + ": send to rank " + std::to_string(dst) + " with tag " + std::to_string(tag));
  sender_.send(data, bytes, dst, tag, deadlineAfter(timeout), timeout);
}

int Channel::recv(void* data, size_t bytes, int src, int64_t tag, Millis timeout) {
  if (src != kAnySource) checkPeer(src, "receive from");
  if (src == kAnySource && size_ == 1) {
    throw InvalidArgument(me() + ": cannot receive from any rank in a job of one rank");
  }
  if (timeout.count() < 0) throw InvalidArgument(me() + ": a recv timeout must be >= 0");
  std::string from = src == kAnySource ? "any rank" : "rank " + std::to_string(src);
  Call call(*this, me() + ": recv from " + from + " with tag " + std::to_string(tag));
  Receive r(data, bytes, src, tag);
  mailbox_.post(r);
  if (!mailbox_.wait(r, deadlineAfter(timeout)) && mailbox_.withdraw(r)) {
    throw TimeoutError(me() + ": recv from " + from + " with tag " + std::to_string(tag) + " (" +
                       std::to_string(bytes) + " bytes) timed out after " + seconds(timeout) +
                       ": no such message arrived (is " + from +
                       " sending with this tag? raise the timeout if the sender is slow)");
  }
  return r.result();
}

// Order: no new calls; wake the sends (interrupt) and stop the I/O thread, so nothing writes into
// a receive's buffer any more; fail the receives (mailbox shutdown); wait for every call to
// return; only then close the sockets the senders were using.
void Channel::close() {
  std::lock_guard<std::mutex> closing(closeMutex_);
  {
    std::lock_guard<std::mutex> lock(callsMutex_);
    if (closed_) return;
    closed_ = true;
  }
  sender_.interrupt();
  receiver_.stop();
  mailbox_.shutdown(me() + ": the point-to-point channel was closed while this receive waited");
  {
    std::unique_lock<std::mutex> lock(callsMutex_);
    callsDone_.wait(lock, [this] { return activeCalls_ == 0; });
  }
  sender_.closeConnections();
}

}  // namespace p2p
}  // namespace hora
