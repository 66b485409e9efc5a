#include "core/transport/shm/setup.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/common/errors.h"
#include "core/common/host_identity.h"
#include "core/common/logging.h"
#include "core/common/spin.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/transport/rendezvous_store.h"

namespace hora {
namespace shm {
namespace {

std::string key(const std::string& what, int rank) {
  return "shm/" + what + "/" + std::to_string(rank);
}

std::string sysError(const char* what) {
  return std::string(what) + " failed: " + std::strerror(errno);
}

// An abstract socket address: a leading NUL, then the name; no file is created.
sockaddr_un abstractAddress(const std::string& name, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  HORA_CHECK(name.size() + 1 < sizeof(a.sun_path), "socket name too long");
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  // The length counts only the bytes of the name: abstract names are not NUL-terminated, and any
  // padding would become part of the name.
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

std::string toHex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

bool waitFd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, net::pollTimeoutMs(deadline));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
    // poll(2) may return early on a rounded timeout; only the deadline itself ends the wait.
    if (rc == 0 && Clock::now() >= deadline) return false;
  }
}

void sendFd(int sock, int fd) {
  // SCM_RIGHTS needs at least one byte of ordinary data to travel with; its value means nothing.
  char byte = 'S';
  iovec iov{&byte, 1};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
  if (::sendmsg(sock, &m, MSG_NOSIGNAL) != 1) throw IoError(sysError("sendmsg(SCM_RIGHTS)"));
}

int recvFd(int sock, Clock::time_point deadline) {
  for (;;) {
    char byte = 0;
    iovec iov{&byte, 1};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof(control);
    // MSG_CMSG_CLOEXEC marks the received descriptor close-on-exec atomically, so a child process
    // started meanwhile never inherits the segment.
    ssize_t n = ::recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
    if (n == 1) {
      cmsghdr* c = CMSG_FIRSTHDR(&m);
      if (c && c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
        return fd;
      }
      throw IoError("rank 0 sent no segment descriptor");
    }
    if (n == 0) throw IoError("rank 0 closed the connection before sending the segment");
    if (errno != EAGAIN && errno != EINTR) throw IoError(sysError("recvmsg"));
    if (!waitFd(sock, POLLIN, deadline)) throw TimeoutError("timed out waiting for the segment");
  }
}

// Rank 0: serves the segment's descriptor to every other rank that proves the job secret.
// Returns "" when all have it, else why not (a rank reported a failure, or the deadline passed).
std::string serveSegment(const ConnectOptions& o, Store& store, int listenFd, const Segment& seg,
                         Clock::time_point deadline) {
  std::set<int> served;
  while (static_cast<int>(served.size()) < o.size - 1) {
    std::vector<int> unserved;
    for (int r = 1; r < o.size; ++r) {
      if (served.count(r) == 0) unserved.push_back(r);
    }
    const std::string doing = "waiting for rank(s) " + rankList(unserved) + " to attach";
    // A rank that could not attach publishes why under its "ok" key; looking for it here (one
    // request for them all) stops rank 0 from serving until the deadline a rank that will never
    // connect.
    std::vector<std::string> okKeys;
    for (int r : unserved) okKeys.push_back(key("ok", r));
    std::vector<std::optional<std::string>> oks =
        storeCall(o, doing, [&] { return store.getMany(okKeys, Millis(0)); });
    for (size_t i = 0; i < unserved.size(); ++i) {
      // A rank publishes "ok..." only once served, "!why" when it could not attach.
      if (oks[i] && !oks[i]->empty() && (*oks[i])[0] == '!') {
        return "rank " + std::to_string(unserved[i]) + ": " + oks[i]->substr(1);
      }
    }
    if (Clock::now() >= deadline) {
      return "timed out after " + std::to_string(o.startTimeout.count()) +
             " ms waiting for rank(s) " + rankList(unserved) + " to attach";
    }
    // Short waits, so a failure published in the store is noticed within about 50 ms.
    if (!waitFd(listenFd, POLLIN, std::min(deadline, Clock::now() + Millis(50)))) continue;
    net::Socket conn(::accept4(listenFd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!conn.valid()) continue;
    auto validate = [&](net::PeerKind kind, int rank) -> std::string {
      if (kind != net::PeerKind::Data || rank < 1 || rank >= o.size)
        return "not a rank of this job";
      if (served.count(rank)) return "rank already attached";
      return "";
    };
    auto hs = net::Handshake::acceptor(o.secret, 0, validate);
    try {
      net::runHandshake(conn.fd(), hs, std::min(deadline, Clock::now() + net::kHandshakeTimeout),
                        "shared-memory set-up");
      sendFd(conn.fd(), seg.fd());
      served.insert(hs.peerRank());
    } catch (const std::exception& e) {
      // One bad local connection must not end set-up for the ranks still to come; the real rank
      // can still connect until the deadline.
      HORA_LOG(Warning, "shared-memory set-up: dropped a local connection: " << e.what());
    }
  }
  return "";
}

// A rank other than 0: fetches and maps the segment rank 0 serves at `name`.
Segment fetchSegment(const ConnectOptions& o, const std::string& name, Clock::time_point deadline) {
  socklen_t len;
  sockaddr_un addr = abstractAddress(name, &len);
  for (;;) {
    net::Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s.valid()) throw IoError(sysError("socket(AF_UNIX)"));
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      if ((errno == EAGAIN || errno == ECONNREFUSED) && Clock::now() < deadline) {
        ::usleep(2000);  // rank 0's backlog is full while it serves others
        continue;
      }
      throw IoError(sysError("connect to rank 0's local socket"));
    }
    auto hs = net::Handshake::connector(o.secret, net::PeerKind::Data, o.rank, 0);
    net::runHandshake(s.fd(), hs, deadline, "shared-memory set-up with rank 0");
    int fd = recvFd(s.fd(), deadline);
    try {
      Segment seg = Segment::attach(fd);
      // The arena is mapped from the same descriptor before it is closed; afterwards nothing could
      // map it.
      seg.mapArena(fd, o.rank);
      ::close(fd);
      return seg;
    } catch (...) {
      ::close(fd);
      throw;
    }
  }
}

// Whether every rank runs on this host with shared memory allowed: the reason not, or "".
std::string sameHostVerdict(const ConnectOptions& o, Store& store, bool disabled,
                            const std::vector<int>& everyone, Clock::time_point deadline) {
  // A disabled rank publishes that instead of its host, so the others learn it in the same step and
  // every rank reaches the same verdict.
  const std::string mine = disabled ? std::string("disabled") : hostIdentity(o.shmHostName);
  storeCall(o, "saying which host it runs on", [&] { store.set(key("host", o.rank), mine); });
  auto hostKey = [](int r) { return key("host", r); };
  std::vector<std::string> hosts =
      awaitRanks(o, store, everyone, hostKey, deadline, "say which host they run on");
  for (int r = 0; r < o.size; ++r) {
    if (hosts[r] == "disabled") return "HORA_SHM_DISABLE is set (rank " + std::to_string(r) + ")";
    // Comparing every rank with rank 0, in rank order, gives every rank the same first mismatch and
    // so the same message.
    if (hosts[r] != hosts[0]) return "ranks 0 and " + std::to_string(r) + " run on different hosts";
  }
  return std::string();
}

// Rank 0: creates the segment and the local socket that hands it out, and publishes the socket's
// name. Returns why it could not (published under the same key), or "".
std::string createSegment(const ConnectOptions& o, Store& store, size_t ringBytes,
                          size_t windowBytes, size_t arenaBytes, Segment* seg,
                          net::Socket* listener) {
  try {
    *seg = Segment::create(o.size, ringBytes, windowBytes, arenaBytes);
    seg->mapArena(seg->fd(), 0);
    // Each rank records its pid before it publishes "ok", so when ShmPeers is built, after every
    // "ok", every peer's pid is there to open a pidfd on.
    seg->rank(0).identity.pid.store(static_cast<int32_t>(::getpid()));
    // A random name keeps concurrent jobs on one host apart; the handshake, not the name, keeps
    // strangers out.
    std::string name = "hora-shm-" + toHex(net::randomBytes(12));
    *listener = net::Socket(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    socklen_t len;
    sockaddr_un addr = abstractAddress(name, &len);
    if (!listener->valid() ||
        ::bind(listener->fd(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listener->fd(), 64) != 0) {
      throw IoError(sysError("listening on a local socket"));
    }
    store.set("shm/addr", name);
  } catch (const std::exception& e) {
    // The other ranks wait for this key; publishing the failure under it ends their wait with
    // rank 0's reason instead of a timeout.
    storeCall(o, "publishing why it has no shared-memory segment",
              [&] { store.set("shm/addr", std::string("!") + e.what()); });
    return std::string("rank 0: ") + e.what();
  }
  return std::string();
}

}  // namespace

Attachment attachJob(const ConnectOptions& o, Store& store, bool disabled, size_t ringBytes,
                     size_t windowBytes, size_t arenaBytes) {
  // One deadline for every step, so that set-up as a whole is bounded by the start timeout.
  const auto deadline = Clock::now() + o.startTimeout;
  Attachment a;
  std::vector<int> everyone;
  for (int r = 0; r < o.size; ++r) everyone.push_back(r);
  a.whyNot = sameHostVerdict(o, store, disabled, everyone, deadline);
  if (!a.whyNot.empty()) return a;

  Segment seg;
  std::string failure;
  if (o.rank == 0) {
    net::Socket listener;
    a.whyNot = createSegment(o, store, ringBytes, windowBytes, arenaBytes, &seg, &listener);
    if (!a.whyNot.empty()) return a;
    failure = serveSegment(o, store, listener.fd(), seg, deadline);
  } else {
    auto addrKey = [](int) { return std::string("shm/addr"); };
    std::string addr =
        awaitRanks(o, store, {0}, addrKey, deadline, "publish the shared-memory segment's address")
            .front();
    if (!addr.empty() && addr[0] == '!') {
      a.whyNot = "rank 0: " + addr.substr(1);
      return a;
    }
    try {
      seg = fetchSegment(o, addr, deadline);
      if (seg.ranks() != o.size) throw IoError("the segment is for another job size");
      seg.rank(o.rank).identity.pid.store(static_cast<int32_t>(::getpid()));
    } catch (const std::exception& e) {
      // Kept and published below instead of thrown: every rank must still reach the "ok" step, or
      // the others would wait there until their timeout.
      failure = e.what();
    }
  }
  // The mapping keeps the memory alive; closing the descriptor now means the memory goes with the
  // last rank that maps it.
  seg.closeFd();
  // "ok" carries the rank's HORA_SHM_CONTROL too: the control plane moves only if all agree.
  std::string ok = o.shmControl ? "ok" : "ok tcp-control";
  storeCall(o, "saying whether it attached to the shared-memory segment",
            [&] { store.set(key("ok", o.rank), failure.empty() ? ok : "!" + failure); });
  auto okKey = [](int r) { return key("ok", r); };
  std::vector<std::string> oks =
      awaitRanks(o, store, everyone, okKey, deadline, "attach to the shared-memory segment");
  a.control = true;
  for (int r = 0; r < o.size; ++r) {
    const std::string& v = oks[r];
    if (v.compare(0, 2, "ok") != 0) {
      a.whyNot = "rank " + std::to_string(r) + ": " + v.substr(1);
      return a;
    }
    if (v != "ok") a.control = false;
  }
  WaitPolicy policy;
  // With more ranks than usable CPUs a spinning rank only delays the peer it waits for (wait.h).
  policy.pause = oversubscribed(o.size) ? Micros(0) : Micros(2);
  policy.yield = o.spin;
  policy.timeout = o.opTimeout;
  a.peers = std::make_shared<ShmPeers>(std::move(seg), o.rank, policy);
  return a;
}

}  // namespace shm
}  // namespace hora
