// TcpStoreServer: the single-threaded poll(2) loop that serves every store client.
//
// Protocol (types in tcp_store_protocol.h): a client connects, passes the handshake of
// core/net/handshake.h as a Store peer, then sends request frames (kStoreMagic) and reads exactly
// one reply frame per request, in order. The server never sends anything unasked.
//
// Why one thread and no locks: the ranks of a job talk to this server mostly at start-up, with
// tiny requests; one event loop serves every connection without contention, and a slow or
// stalled client can only stall its own connection.
//
// Blocking requests (Get of a missing key, Wait, GetMany) are parked, not polled: the connection
// stops reading further requests (so its replies stay in request order) and the parked request is
// answered by the Set/Add that provides the keys, or by its own deadline (a TimedOut reply that
// names the missing keys; GetMany's Values with what exists). Clients therefore never spin
// against the server. A parked request remembers how many of its keys, in order, are known to
// exist (keys are never removed), so that each Set looks at one key per parked request: N ranks
// each awaiting all N ranks' keys cost the server O(N^2) lookups over a start-up, not O(N^3).
//
// A connection is dropped, with a warning, on anything that is not this protocol (a failed
// handshake, a bad frame header, an unknown request type, a payload that does not decode), because
// a byte stream cannot be resynchronised after garbage; other connections carry on. A client that
// simply disconnects is dropped quietly.
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <thread>

#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/net/frame.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/store/memory_store.h"
#include "core/store/tcp_store.h"
#include "core/store/tcp_store_protocol.h"

namespace hora {

using namespace store_protocol;
using net::Handshake;
using net::IoStatus;
using net::Socket;

class TcpStoreServer::Impl {
 public:
  Impl(const std::string& host, int port, const std::string& secret, StoreServerLimits limits);
  ~Impl();
  int port() const { return port_; }
  void stop();

 private:
  // One client. in/out are buffers with a read position instead of erase-from-front, so a burst of
  // small frames costs no copying; handshakeDeadline bounds how long an unauthenticated
  // connection may hold a slot (a port scanner or a stuck peer cannot pile them up forever).
  struct Conn {
    Conn(Socket s, std::string p, Handshake h)
        : sock(std::move(s)), peer(std::move(p)), hs(std::move(h)) {}
    Socket sock;
    std::string peer;
    Handshake hs;
    bool authed = false;
    Clock::time_point handshakeDeadline;
    std::string in;
    size_t inPos = 0;
    std::string out;
    size_t outPos = 0;
    bool waiting = false;  // a Get/Wait/GetMany is parked in waiters_
    bool dead = false;
  };
  // A parked Get/Wait/GetMany; timeoutMs is echoed in the TimedOut reply for the client's
  // message. keys[0, known) exist.
  struct Waiter {
    Conn* conn;
    uint16_t type;
    std::vector<std::string> keys;
    Clock::time_point deadline;
    uint64_t timeoutMs;
    size_t known = 0;
  };

  void run();
  void serveOnce();
  void acceptAll();
  void evictOldestPending();
  bool parkedInputFull(const Conn& c) const;
  void onReadable(Conn& c);
  void handshakeStep(Conn& c, const char* data, size_t n);
  void processFrames(Conn& c);
  void handle(Conn& c, uint16_t type, net::Reader& r);
  void reply(Conn& c, uint16_t type, const std::string& payload);
  void flush(Conn& c);
  void drop(Conn& c, const std::string& why, bool warn);
  void notifyWaiters();
  void resumeReleased();
  void expire(Clock::time_point now);
  std::vector<std::string> missing(const std::vector<std::string>& keys) const;
  bool allKnown(Waiter& w) const;
  std::string valuesOf(const std::vector<std::string>& keys) const;
  int nextTimeoutMs() const;

  Socket listener_;
  int port_ = 0;
  std::string secret_;
  StoreServerLimits limits_;
  int wakeFd_ = -1;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
  std::map<std::string, std::string> values_;
  std::vector<std::unique_ptr<Conn>> conns_;
  std::vector<Waiter> waiters_;
  // Connections whose parked request was just answered and whose queued frames are still to be
  // handled. A work list, not a recursive call: each queued request can release another one.
  std::vector<Conn*> released_;
};

TcpStoreServer::Impl::Impl(const std::string& host, int port, const std::string& secret,
                           StoreServerLimits limits)
    : secret_(secret), limits_(limits) {
  listener_ = net::listenOn(host, port, &port_);
  wakeFd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ < 0) throw IoError("store server: cannot create eventfd");
  thread_ = std::thread([this] { run(); });
}

TcpStoreServer::Impl::~Impl() {
  stop();
  if (wakeFd_ >= 0) ::close(wakeFd_);
}

void TcpStoreServer::Impl::stop() {
  if (!stopping_.exchange(true)) {
    uint64_t one = 1;
    ssize_t ignored = ::write(wakeFd_, &one, sizeof(one));
    (void)ignored;
  }
  if (thread_.joinable()) thread_.join();
  conns_.clear();
  waiters_.clear();
  released_.clear();
  listener_.reset();
}

void TcpStoreServer::Impl::run() {
  while (!stopping_) {
    try {
      serveOnce();
    } catch (const std::exception& e) {
      // Only resource exhaustion gets here (poll or eventfd failing); keep serving.
      HORA_LOG(Error, "store server: " << e.what());
    }
  }
}

void TcpStoreServer::Impl::serveOnce() {
  std::vector<pollfd> fds;
  fds.push_back({wakeFd_, POLLIN, 0});
  fds.push_back({listener_.fd(), POLLIN, 0});
  for (auto& c : conns_) {
    // Past its read-ahead bound a parked connection is only watched for hang-up (see onReadable).
    short events = parkedInputFull(*c) ? POLLRDHUP : POLLIN;
    if (c->outPos < c->out.size()) events |= POLLOUT;
    fds.push_back({c->sock.fd(), events, 0});
  }
  int rc = ::poll(fds.data(), fds.size(), nextTimeoutMs());
  if (rc < 0 && errno != EINTR) throw IoError(std::string("poll failed: ") + std::strerror(errno));
  if (rc > 0) {
    if (fds[0].revents != 0) {
      uint64_t drained;
      ssize_t ignored = ::read(wakeFd_, &drained, sizeof(drained));
      (void)ignored;
    }
    if (stopping_) return;
    // conns_ may grow in acceptAll(); the first fds.size() - 2 entries match the poll set.
    size_t polled = fds.size() - 2;
    for (size_t i = 0; i < polled; ++i) {
      short ev = fds[i + 2].revents;
      Conn& c = *conns_[i];
      if (ev & POLLOUT) flush(c);
      if (!c.dead && (ev & (POLLIN | POLLHUP | POLLERR | POLLRDHUP))) {
        if (parkedInputFull(c)) {
          drop(c, "hung up with a request parked", false);
        } else {
          onReadable(c);
        }
      }
      resumeReleased();
    }
    if (fds[1].revents != 0) acceptAll();
  }
  expire(Clock::now());
  resumeReleased();
  // Forget dropped connections and whatever they had parked.
  auto deadWaiter = [](const Waiter& w) { return w.conn->dead; };
  waiters_.erase(std::remove_if(waiters_.begin(), waiters_.end(), deadWaiter), waiters_.end());
  auto deadConn = [](const std::unique_ptr<Conn>& c) { return c->dead; };
  conns_.erase(std::remove_if(conns_.begin(), conns_.end(), deadConn), conns_.end());
}

int TcpStoreServer::Impl::nextTimeoutMs() const {
  Clock::time_point next = Clock::time_point::max();
  for (const auto& w : waiters_) next = std::min(next, w.deadline);
  for (const auto& c : conns_) {
    if (!c->authed) next = std::min(next, c->handshakeDeadline);
  }
  return next == Clock::time_point::max() ? -1 : net::pollTimeoutMs(next);
}

void TcpStoreServer::Impl::acceptAll() {
  for (;;) {
    std::string peer;
    Socket s = net::acceptPending(listener_.fd(), &peer);
    if (!s.valid()) return;
    evictOldestPending();
    // Only store clients may stay: a data or control connection here is a rank given the store's
    // address by mistake, and refusing it in the handshake tells that rank so at once.
    auto validate = [](net::PeerKind kind, int) {
      if (kind == net::PeerKind::Store) return std::string();
      return std::string("a ") + net::peerKindName(kind) + " connection reached the store";
    };
    auto c = std::make_unique<Conn>(std::move(s), peer, Handshake::acceptor(secret_, -1, validate));
    c->handshakeDeadline = Clock::now() + limits_.handshakeTimeout;
    handshakeStep(*c, nullptr, 0);
    HORA_LOG(Debug, "store server: connection from " << peer);
    conns_.push_back(std::move(c));
  }
}

// Makes room for one more unauthenticated connection: at the cap, the oldest one goes. conns_ is
// in accept order, so the first pending one is the oldest.
void TcpStoreServer::Impl::evictOldestPending() {
  int pending = 0;
  Conn* oldest = nullptr;
  for (auto& c : conns_) {
    if (c->dead || c->authed) continue;
    if (oldest == nullptr) oldest = c.get();
    ++pending;
  }
  if (oldest != nullptr && pending >= limits_.maxPendingHandshakes) {
    drop(*oldest, "too many connections waiting for the handshake; the oldest is dropped", true);
  }
}

void TcpStoreServer::Impl::handshakeStep(Conn& c, const char* data, size_t n) {
  if (n > 0) c.hs.input(data, n);
  if (c.hs.outputPending() > 0) {
    c.out.append(c.hs.outputData(), c.hs.outputPending());
    c.hs.outputSent(c.hs.outputPending());
  }
  if (c.hs.state() == Handshake::State::Failed) {
    flush(c);  // best effort: tells an honest client why
    return drop(c, c.hs.failure(), true);
  }
  if (c.hs.state() == Handshake::State::Done) c.authed = true;
  flush(c);
}

// A parked request stops frame processing, not reading: a client may pipeline requests behind
// it. Reading stops once limits_.parkedInputBytes are buffered; the kernel's buffers then fill
// and TCP holds the client back, so no client can grow the server's memory without bound.
bool TcpStoreServer::Impl::parkedInputFull(const Conn& c) const {
  return c.waiting && c.in.size() - c.inPos >= limits_.parkedInputBytes;
}

void TcpStoreServer::Impl::onReadable(Conn& c) {
  char buf[64 * 1024];
  while (!c.dead && !parkedInputFull(c)) {
    // During the handshake read only what the handshake asks for: bytes after it belong to the
    // first request and must not be fed to the handshake.
    size_t want = c.authed ? sizeof(buf) : std::min(sizeof(buf), c.hs.inputWanted());
    if (want == 0) return;
    net::IoResult r = net::recvSome(c.sock.fd(), buf, want);
    if (r.status == IoStatus::WouldBlock) return;
    if (r.status != IoStatus::Ok) {
      return drop(c, c.authed ? "client disconnected" : "closed during the handshake", false);
    }
    if (!c.authed) {
      handshakeStep(c, buf, r.bytes);
      continue;
    }
    c.in.append(buf, r.bytes);
    processFrames(c);
  }
}

// Handles every complete frame buffered for c, in order. Stops at a parked request: the frames
// after it wait in c.in until it is answered, which keeps one reply per request, in order.
void TcpStoreServer::Impl::processFrames(Conn& c) {
  while (!c.dead && !c.waiting) {
    size_t avail = c.in.size() - c.inPos;
    if (avail < net::kFrameHeaderBytes) break;
    auto* p = reinterpret_cast<const uint8_t*>(c.in.data() + c.inPos);
    net::FrameHeader h = net::decodeHeader(p);
    // The header is checked before the payload is awaited: a bogus length never makes the server
    // buffer up to it.
    std::string bad = net::validateHeader(h, net::kStoreMagic, kMaxFrameBytes);
    if (!bad.empty()) return drop(c, bad, true);
    if (avail < net::kFrameHeaderBytes + h.length) break;
    net::Reader r(p + net::kFrameHeaderBytes, h.length);
    c.inPos += net::kFrameHeaderBytes + h.length;
    handle(c, h.type, r);
  }
  if (c.inPos == c.in.size()) {
    c.in.clear();
    c.inPos = 0;
  } else if (c.inPos > (1u << 20)) {  // compact now and then, not after every frame
    c.in.erase(0, c.inPos);
    c.inPos = 0;
  }
}

void TcpStoreServer::Impl::handle(Conn& c, uint16_t type, net::Reader& r) {
  auto readKeys = [&r] {
    uint32_t n = r.u32();
    std::vector<std::string> keys;
    for (uint32_t i = 0; i < n && r.ok(); ++i) keys.push_back(r.str());
    return keys;
  };
  // A payload must decode exactly: short (an overrun) or with bytes left over, it was not written
  // by this protocol's client.
  auto malformed = [&] { return !r.ok() || !r.atEnd(); };
  switch (type) {
    case kSet: {
      std::string key = r.str();
      std::string value = r.str();
      if (malformed()) break;
      values_[key] = std::move(value);
      reply(c, kOk, "");
      notifyWaiters();
      return;
    }
    case kAdd: {
      std::string key = r.str();
      int64_t delta = r.i64();
      if (malformed()) break;
      auto it = values_.find(key);
      int64_t now = 0;
      // Adding to a key that holds something other than a counter is the caller's mistake, not
      // a protocol error: it is answered with an Error reply and the connection stays.
      try {
        if (it != values_.end()) now = parseCounter(key, it->second);
      } catch (const InvalidArgument& e) {
        return reply(c, kError, net::Writer().str(e.what()).take());
      }
      // Wraps like a two's-complement integer instead of overflowing (undefined for int64_t).
      now = static_cast<int64_t>(static_cast<uint64_t>(now) + static_cast<uint64_t>(delta));
      values_[key] = std::to_string(now);
      reply(c, kCounter, net::Writer().i64(now).take());
      notifyWaiters();
      return;
    }
    case kCheck: {
      auto keys = readKeys();
      if (malformed()) break;
      return reply(c, kBool, net::Writer().u8(missing(keys).empty() ? 1 : 0).take());
    }
    case kGet:
    case kWait:
    case kGetMany: {
      // Clamped so the deadline below cannot overflow, whatever the client asked for.
      uint64_t timeoutMs = std::min(r.u64(), kMaxWaitMs);
      std::vector<std::string> keys = type == kGet ? std::vector<std::string>{r.str()} : readKeys();
      if (malformed()) break;
      c.waiting = true;
      waiters_.push_back(
          {&c, type, std::move(keys), Clock::now() + Millis(timeoutMs), timeoutMs, 0});
      notifyWaiters();  // answers at once when the keys are already there
      return;
    }
    default: return drop(c, "unknown request type " + std::to_string(type), true);
  }
  drop(c, "malformed request payload", true);
}

// Answers every parked request whose keys are all present and queues those connections to go on
// with the requests they sent meanwhile (resumeReleased). Called after every change to values_.
void TcpStoreServer::Impl::notifyWaiters() {
  for (size_t i = 0; i < waiters_.size();) {
    Waiter& w = waiters_[i];
    if (!w.conn->dead && allKnown(w)) {
      if (w.type == kGet) {
        reply(*w.conn, kValue, net::Writer().str(values_[w.keys[0]]).take());
      } else if (w.type == kGetMany) {
        reply(*w.conn, kValues, valuesOf(w.keys));
      } else {
        reply(*w.conn, kOk, "");
      }
      w.conn->waiting = false;
      released_.push_back(w.conn);
      waiters_.erase(waiters_.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
}

// Handles the frames queued behind answered requests. Iterative: a connection with a million
// queued requests, each releasing the next, must not nest a million calls deep.
void TcpStoreServer::Impl::resumeReleased() {
  while (!released_.empty()) {
    Conn* c = released_.back();
    released_.pop_back();
    processFrames(*c);
  }
}

// Deadlines: parked requests past theirs get TimedOut (and their connections resume); connections
// still unauthenticated past the handshake deadline are dropped.
void TcpStoreServer::Impl::expire(Clock::time_point now) {
  for (size_t i = 0; i < waiters_.size();) {
    Waiter& w = waiters_[i];
    if (!w.conn->dead && w.deadline <= now) {
      if (w.type == kGetMany) {
        reply(*w.conn, kValues, valuesOf(w.keys));
      } else {
        auto keys = missing(w.keys);
        net::Writer out;
        out.u64(w.timeoutMs).u32(static_cast<uint32_t>(keys.size()));
        for (const auto& k : keys) out.str(k);
        reply(*w.conn, kTimedOut, out.take());
      }
      w.conn->waiting = false;
      released_.push_back(w.conn);
      waiters_.erase(waiters_.begin() + static_cast<long>(i));
    } else {
      ++i;
    }
  }
  for (auto& c : conns_) {
    if (!c->dead && !c->authed && c->handshakeDeadline <= now)
      drop(*c, "handshake timed out", true);
  }
}

std::vector<std::string> TcpStoreServer::Impl::missing(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  for (const auto& k : keys) {
    if (values_.find(k) == values_.end()) out.push_back(k);
  }
  return out;
}

bool TcpStoreServer::Impl::allKnown(Waiter& w) const {
  while (w.known < w.keys.size() && values_.count(w.keys[w.known]) != 0) ++w.known;
  return w.known == w.keys.size();
}

// GetMany's reply: every key's value, or that it is missing.
std::string TcpStoreServer::Impl::valuesOf(const std::vector<std::string>& keys) const {
  net::Writer out;
  out.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) {
    auto it = values_.find(k);
    out.u8(it == values_.end() ? 0 : 1).str(it == values_.end() ? std::string() : it->second);
  }
  return out.take();
}

void TcpStoreServer::Impl::reply(Conn& c, uint16_t type, const std::string& payload) {
  c.out += net::buildFrame(net::kStoreMagic, type, payload);
  flush(c);
}

// Writes what the socket takes now; the rest goes out when poll() reports POLLOUT, so a client
// that does not read its replies never blocks the loop.
void TcpStoreServer::Impl::flush(Conn& c) {
  while (!c.dead && c.outPos < c.out.size()) {
    net::IoResult r = net::sendSome(c.sock.fd(), c.out.data() + c.outPos, c.out.size() - c.outPos);
    if (r.status == IoStatus::WouldBlock) return;
    if (r.status != IoStatus::Ok) return drop(c, "client disconnected", false);
    c.outPos += r.bytes;
  }
  if (c.outPos == c.out.size()) {
    c.out.clear();
    c.outPos = 0;
  }
}

void TcpStoreServer::Impl::drop(Conn& c, const std::string& why, bool warn) {
  if (c.dead) return;
  c.dead = true;
  if (warn) {
    HORA_LOG(Warning, "store server: dropping connection from " << c.peer << ": " << why);
  } else {
    HORA_LOG(Debug, "store server: connection from " << c.peer << " ended: " << why);
  }
  c.sock.reset();
}

StoreServerLimits defaultStoreServerLimits() {
  return {net::kMaxPendingHandshakes, net::kHandshakeTimeout};
}

TcpStoreServer::TcpStoreServer(const std::string& host, int port, const std::string& secret,
                               StoreServerLimits limits)
    : impl_(std::make_unique<Impl>(host, port, secret, limits)) {}

TcpStoreServer::~TcpStoreServer() = default;

int TcpStoreServer::port() const { return impl_->port(); }

void TcpStoreServer::stop() { impl_->stop(); }

}  // namespace hora
