// TcpStoreClient: blocking request/reply over a pool of authenticated connections.
//
// Each call takes a connection of its own for the whole request/reply (protocol in
// tcp_store_protocol.h and tcp_store_server.cc): the server answers a connection's requests in
// order and parks blocking ones, so two threads sharing a connection would wait behind each
// other. A connection that failed in any way mid-call is discarded, never pooled again: its
// stream position is unknown, and the next reply read from it could belong to the wrong request.
#include "core/store/tcp_store.h"

#include <algorithm>

#include "core/common/errors.h"
#include "core/net/frame.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/store/memory_store.h"
#include "core/store/tcp_store_protocol.h"

namespace hora {

using namespace store_protocol;

struct TcpStoreClient::Connection {
  net::Socket sock;
};

struct TcpStoreClient::Reply {
  uint16_t type;
  std::string payload;
};

namespace {

// Extra time a client gives the server beyond a request's own timeout before it calls the server
// unresponsive; requests without a timeout of their own get at least this long. The server's
// TimedOut reply, sent at the request's own deadline, normally arrives well inside it, so the
// caller sees which keys were missing instead of a bare socket timeout.
constexpr Millis kReplyGrace{30000};
// A reply payload is read in pieces of at most this size (see call()).
constexpr size_t kReplyChunkBytes = 1 << 20;

// Negative timeouts mean "do not wait"; huge ones are clamped as the server would clamp them.
uint64_t clampMs(Millis t) {
  return static_cast<uint64_t>(std::clamp<int64_t>(t.count(), 0, kMaxWaitMs));
}

}  // namespace

TcpStoreClient::TcpStoreClient(const std::string& host, int port, const std::string& secret,
                               Millis connectTimeout)
    : host_(host), port_(port), secret_(secret), connectTimeout_(connectTimeout) {
  idle_.push_back(open());
}

TcpStoreClient::~TcpStoreClient() = default;

std::string TcpStoreClient::where() const { return "store at " + net::joinHostPort(host_, port_); }

std::unique_ptr<TcpStoreClient::Connection> TcpStoreClient::open() {
  auto deadline = Clock::now() + connectTimeout_;
  auto c = std::make_unique<Connection>();
  try {
    c->sock = net::connectWithRetry(host_, port_, deadline);
  } catch (const IoError& e) {
    throw IoError(where() + " is unreachable: " + e.what());
  }
  // The store has no rank: the client claims none (-1) and accepts any rank the server names.
  net::Handshake hs = net::Handshake::connector(secret_, net::PeerKind::Store, -1, -1);
  net::runHandshake(c->sock.fd(), hs, deadline, where());
  return c;
}

TcpStoreClient::Reply TcpStoreClient::call(uint16_t type, const std::string& payload,
                                           Millis replyTimeout) {
  std::unique_ptr<Connection> c;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      c = std::move(idle_.back());
      idle_.pop_back();
    }
  }
  if (!c) c = open();
  // On any failure the connection is dropped with the exception, never returned to the pool.
  auto deadline = Clock::now() + replyTimeout;
  std::string frame = net::buildFrame(net::kStoreMagic, type, payload);
  net::sendAll(c->sock.fd(), frame.data(), frame.size(), deadline, where());
  uint8_t header[net::kFrameHeaderBytes];
  net::recvAll(c->sock.fd(), header, sizeof(header), deadline, where());
  net::FrameHeader h = net::decodeHeader(header);
  std::string bad = net::validateHeader(h, net::kStoreMagic, kMaxFrameBytes);
  if (!bad.empty()) throw IoError(where() + " sent a malformed reply: " + bad);
  // The payload buffer grows with the bytes that arrive, never to the announced length up front:
  // a corrupt header must not cost memory that no bytes back.
  Reply reply{h.type, std::string()};
  while (reply.payload.size() < h.length) {
    size_t at = reply.payload.size();
    size_t n = std::min<size_t>(h.length - at, kReplyChunkBytes);
    reply.payload.resize(at + n);
    net::recvAll(c->sock.fd(), &reply.payload[at], n, deadline, where());
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(std::move(c));
  }
  // Error and TimedOut are answers, not failures of the connection (it went back to the pool
  // above); they become the typed errors the Store contract promises.
  if (reply.type == kError) {
    net::Reader r(reply.payload);
    throw InvalidArgument(r.str());
  }
  if (reply.type == kTimedOut) {
    net::Reader r(reply.payload);
    Millis timeout(static_cast<int64_t>(r.u64()));
    uint32_t n = r.u32();
    std::vector<std::string> missing;
    for (uint32_t i = 0; i < n && r.ok(); ++i) missing.push_back(r.str());
    throw TimeoutError(storeTimeoutMessage(missing, timeout));
  }
  return reply;
}

void TcpStoreClient::set(const std::string& key, const std::string& value) {
  Reply r =
      call(kSet, net::Writer().str(key).str(value).take(), std::max(connectTimeout_, kReplyGrace));
  if (r.type != kOk) throw IoError(where() + ": unexpected reply to set");
}

std::string TcpStoreClient::get(const std::string& key, Millis timeout) {
  uint64_t ms = clampMs(timeout);
  Reply r = call(kGet, net::Writer().u64(ms).str(key).take(), Millis(ms) + kReplyGrace);
  net::Reader reader(r.payload);
  std::string value = reader.str();
  if (r.type != kValue || !reader.ok()) throw IoError(where() + ": unexpected reply to get");
  return value;
}

int64_t TcpStoreClient::add(const std::string& key, int64_t delta) {
  Reply r =
      call(kAdd, net::Writer().str(key).i64(delta).take(), std::max(connectTimeout_, kReplyGrace));
  net::Reader reader(r.payload);
  int64_t value = reader.i64();
  if (r.type != kCounter || !reader.ok()) throw IoError(where() + ": unexpected reply to add");
  return value;
}

bool TcpStoreClient::check(const std::vector<std::string>& keys) {
  net::Writer w;
  w.u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  Reply r = call(kCheck, w.take(), std::max(connectTimeout_, kReplyGrace));
  net::Reader reader(r.payload);
  uint8_t present = reader.u8();
  if (r.type != kBool || !reader.ok()) throw IoError(where() + ": unexpected reply to check");
  return present != 0;
}

void TcpStoreClient::wait(const std::vector<std::string>& keys, Millis timeout) {
  uint64_t ms = clampMs(timeout);
  net::Writer w;
  w.u64(ms).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  Reply r = call(kWait, w.take(), Millis(ms) + kReplyGrace);
  if (r.type != kOk) throw IoError(where() + ": unexpected reply to wait");
}

std::vector<std::optional<std::string>> TcpStoreClient::getMany(
    const std::vector<std::string>& keys, Millis timeout) {
  uint64_t ms = clampMs(timeout);
  net::Writer w;
  w.u64(ms).u32(static_cast<uint32_t>(keys.size()));
  for (const auto& k : keys) w.str(k);
  Reply r = call(kGetMany, w.take(), Millis(ms) + kReplyGrace);
  net::Reader reader(r.payload);
  uint32_t n = reader.u32();
  std::vector<std::optional<std::string>> values;
  for (uint32_t i = 0; i < n && reader.ok(); ++i) {
    bool present = reader.u8() != 0;
    std::string value = reader.str();
    values.push_back(present ? std::make_optional(std::move(value)) : std::nullopt);
  }
  if (r.type != kValues || !reader.ok() || values.size() != keys.size()) {
    throw IoError(where() + ": unexpected reply to getMany");
  }
  return values;
}

}  // namespace hora
