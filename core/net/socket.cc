#include "core/net/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include "core/common/errors.h"
#include "core/net/fault_injection.h"

namespace hora {
namespace net {
namespace {

// Kernel buffer size requested for every connection: room for many pipeline segments in flight
// while the receiver is busy reducing, and for the bandwidth-delay product of fast links (setting
// it turns the kernel's auto-tuning off). On loopback 512 KiB to 4 MiB measured the same. The
// kernel caps the value at net.core.{w,r}mem_max.
constexpr int kSocketBufferBytes = 4 << 20;

std::string errnoText(int err) { return std::strerror(err); }

// The injected cut (see fault_injection.h): what a peer reset looks like to the sender.
IoResult cutBySend(int fd, const void* data, size_t bytes) {
  if (bytes > 0) (void)::send(fd, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
  ::shutdown(fd, SHUT_RDWR);
  return {IoStatus::Closed, 0, ECONNRESET};
}

sockaddr_in resolveIpv4(const std::string& host, int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (host.empty() || host == "0.0.0.0" || host == "*") {
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    return addr;
  }
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) == 1) return addr;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    throw IoError("cannot resolve host '" + host + "': " + gai_strerror(rc));
  }
  addr.sin_addr = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
  freeaddrinfo(found);
  return addr;
}

std::string formatAddress(const sockaddr_in& addr) {
  char text[INET_ADDRSTRLEN] = "?";
  inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
  return joinHostPort(text, ntohs(addr.sin_port));
}

bool interfaceAddress(const std::string& name, std::string* out) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* it = list; it != nullptr && !found; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    if (name != it->ifa_name) continue;
    char text[INET_ADDRSTRLEN];
    auto* in = reinterpret_cast<sockaddr_in*>(it->ifa_addr);
    if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text)) != nullptr) {
      *out = text;
      found = true;
    }
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.release();
  }
  return *this;
}

int Socket::release() {
  int fd = fd_;
  fd_ = -1;
  return fd;
}

void Socket::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdownBoth() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

IoResult sendSome(int fd, const void* data, size_t bytes) {
  FaultDecision fault = faultBeforeSend(bytes);
  if (fault.cut) return cutBySend(fd, data, fault.allowBytes);
  for (;;) {
    ssize_t n = ::send(fd, data, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return {IoStatus::Ok, static_cast<size_t>(n), 0};
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) return {IoStatus::WouldBlock, 0, 0};
    if (err == EPIPE || err == ECONNRESET || err == ENOTCONN) return {IoStatus::Closed, 0, err};
    return {IoStatus::Failed, 0, err};
  }
}

IoResult recvSome(int fd, void* data, size_t bytes) {
  for (;;) {
    ssize_t n = ::recv(fd, data, bytes, MSG_DONTWAIT);
    if (n > 0) return {IoStatus::Ok, static_cast<size_t>(n), 0};
    if (n == 0) return bytes == 0 ? IoResult{IoStatus::Ok, 0, 0} : IoResult{IoStatus::Closed, 0, 0};
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) return {IoStatus::WouldBlock, 0, 0};
    if (err == ECONNRESET || err == ENOTCONN || err == EPIPE) return {IoStatus::Closed, 0, err};
    return {IoStatus::Failed, 0, err};
  }
}

std::string describe(const IoResult& r) {
  switch (r.status) {
    case IoStatus::Ok: return "ok";
    case IoStatus::WouldBlock: return "would block";
    case IoStatus::Closed:
      return r.error == 0 ? "connection closed by peer"
                          : "connection closed (" + errnoText(r.error) + ")";
    case IoStatus::Failed: return errnoText(r.error);
  }
  return "unknown";
}

std::string peerAddress(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw =
      addr.ss_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&addr)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr);
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return "";
  return ::inet_ntop(addr.ss_family, raw, text, sizeof(text)) ? std::string(text) : "";
}

void setKeepalive(int fd, Millis idle, Millis interval, int count) {
  int domain = 0;
  socklen_t length = sizeof(domain);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) == 0 && domain != AF_INET &&
      domain != AF_INET6) {
    return;
  }
  int one = 1;
  int idleS = static_cast<int>(std::max<int64_t>(1, idle.count() / 1000));
  int intervalS = static_cast<int>(std::max<int64_t>(1, interval.count() / 1000));
  bool ok = setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one)) == 0 &&
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idleS, sizeof(idleS)) == 0 &&
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intervalS, sizeof(intervalS)) == 0 &&
            setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count)) == 0;
  if (!ok) throw IoError("cannot set keepalive options: " + errnoText(errno));
}

void setNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    throw IoError("cannot make socket non-blocking: " + errnoText(errno));
  }
}

void tuneConnection(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  int size = kSocketBufferBytes;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
}

Socket listenOn(const std::string& host, int port, int* boundPort) {
  sockaddr_in addr = resolveIpv4(host, port);
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s.valid()) throw IoError("cannot create socket: " + errnoText(errno));
  int one = 1;
  setsockopt(s.fd(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  // Accepted sockets inherit the buffer sizes, which must be set before the handshake for the
  // TCP window scale to allow them.
  int size = kSocketBufferBytes;
  setsockopt(s.fd(), SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
  setsockopt(s.fd(), SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    std::string text = "cannot bind " + joinHostPort(host.empty() ? "0.0.0.0" : host, port) + ": " +
                       errnoText(err);
    if (err == EADDRINUSE) {
      text +=
          " (another process holds this port, perhaps an earlier job still running: stop it, "
          "or choose a free port)";
    }
    throw IoError(text);
  }
  if (::listen(s.fd(), SOMAXCONN) != 0) throw IoError("cannot listen: " + errnoText(errno));
  sockaddr_in bound{};
  socklen_t len = sizeof(bound);
  getsockname(s.fd(), reinterpret_cast<sockaddr*>(&bound), &len);
  if (boundPort != nullptr) *boundPort = ntohs(bound.sin_port);
  return s;
}

Socket acceptPending(int listenFd, std::string* peer) {
  for (;;) {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    int fd =
        ::accept4(listenFd, reinterpret_cast<sockaddr*>(&addr), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      tuneConnection(fd);
      if (peer != nullptr) *peer = formatAddress(addr);
      return Socket(fd);
    }
    // A connection that died in the backlog (ECONNABORTED) or a signal: try the next one.
    if (errno == EINTR || errno == ECONNABORTED) continue;
    return Socket();
  }
}

Socket startConnect(const std::string& host, int port, bool* pending, int* error) {
  sockaddr_in addr = resolveIpv4(host, port);
  Socket s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!s.valid()) throw IoError("cannot create socket: " + errnoText(errno));
  tuneConnection(s.fd());
  *pending = false;
  *error = 0;
  if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return s;
  if (errno == EINPROGRESS || errno == EINTR) {
    *pending = true;
    return s;
  }
  *error = errno;
  return Socket();
}

int connectResult(int fd) {
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

Socket connectWithRetry(const std::string& host, int port, Clock::time_point deadline) {
  auto backoff = Millis(10);
  std::string lastError = "timed out";
  for (;;) {
    bool pending = false;
    int err = 0;
    Socket s;
    try {
      s = startConnect(host, port, &pending, &err);
    } catch (const IoError& e) {
      // A name not published yet (a Kubernetes pod's, until its Service lists it) may resolve
      // later: retried like a refused connection until the deadline.
      lastError = e.what();
      if (Clock::now() + backoff >= deadline) break;
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, Millis(500));
      continue;
    }
    if (s.valid() && pending) {
      if (!waitFor(s.fd(), POLLOUT, deadline)) {
        lastError = "timed out";
        break;
      }
      err = connectResult(s.fd());
    }
    if (s.valid() && err == 0) return s;
    lastError = errnoText(err);
    if (Clock::now() + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, Millis(500));
  }
  throw IoError("cannot connect to " + joinHostPort(host, port) + ": " + lastError);
}

int pollTimeoutMs(Clock::time_point deadline) {
  auto now = Clock::now();
  if (deadline <= now) return 0;
  auto ms = std::chrono::duration_cast<Millis>(deadline - now).count() + 1;
  return static_cast<int>(std::min<long long>(ms, INT_MAX));
}

bool waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, pollTimeoutMs(deadline));
    if (rc > 0) return true;
    if (rc == 0) {
      if (Clock::now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) throw IoError(std::string("poll failed: ") + errnoText(errno));
  }
}

void sendAll(int fd, const void* data, size_t bytes, Clock::time_point deadline,
             const std::string& what) {
  auto* p = static_cast<const uint8_t*>(data);
  size_t done = 0;
  while (done < bytes) {
    IoResult r = sendSome(fd, p + done, bytes - done);
    if (r.status == IoStatus::Ok) {
      done += r.bytes;
    } else if (r.status == IoStatus::WouldBlock) {
      if (!waitFor(fd, POLLOUT, deadline)) throw TimeoutError(what + ": timed out sending");
    } else {
      throw IoError(what + ": " + describe(r));
    }
  }
}

void recvAll(int fd, void* data, size_t bytes, Clock::time_point deadline,
             const std::string& what) {
  auto* p = static_cast<uint8_t*>(data);
  size_t done = 0;
  while (done < bytes) {
    IoResult r = recvSome(fd, p + done, bytes - done);
    if (r.status == IoStatus::Ok) {
      done += r.bytes;
    } else if (r.status == IoStatus::WouldBlock) {
      if (!waitFor(fd, POLLIN, deadline))
        throw TimeoutError(what + ": timed out waiting for a reply");
    } else {
      throw IoError(what + ": " + describe(r));
    }
  }
}

std::string advertisedHost(const std::string& listenHost) {
  if (!listenHost.empty()) {
    std::string address;
    if (interfaceAddress(listenHost, &address)) return address;
    return listenHost;
  }
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') {
    try {
      sockaddr_in addr = resolveIpv4(name, 0);
      char text[INET_ADDRSTRLEN];
      if (inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text)) != nullptr) return text;
    } catch (const IoError&) {
      // Unresolvable host name: fall through to loopback, which serves single-host jobs.
    }
  }
  return "127.0.0.1";
}

bool isLoopbackHost(const std::string& host) {
  if (host == "localhost") return true;
  in_addr addr{};
  return inet_pton(AF_INET, host.c_str(), &addr) == 1 && (ntohl(addr.s_addr) >> 24) == 127;
}

std::string serverBindHost(const std::string& host, Clock::time_point deadline) {
  auto backoff = Millis(10);
  for (;;) {
    try {
      return serverBindHost(host);
    } catch (const IoError&) {
      if (Clock::now() + backoff >= deadline) throw;
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, Millis(500));
    }
  }
}

std::string serverBindHost(const std::string& host) {
  if (host.empty() || host == "0.0.0.0" || host == "*") return "";
  sockaddr_in resolved = resolveIpv4(host, 0);
  char text[INET_ADDRSTRLEN] = "";
  inet_ntop(AF_INET, &resolved.sin_addr, text, sizeof(text));
  if ((ntohl(resolved.sin_addr.s_addr) >> 24) == 127) return isLoopbackHost(host) ? text : "";
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  bool local = false;
  for (ifaddrs* it = list; it != nullptr && !local; it = it->ifa_next) {
    if (it->ifa_addr == nullptr || it->ifa_addr->sa_family != AF_INET) continue;
    local =
        reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr.s_addr == resolved.sin_addr.s_addr;
  }
  freeifaddrs(list);
  return local ? text : "";
}

std::string joinHostPort(const std::string& host, int port) {
  return host + ":" + std::to_string(port);
}

void parseHostPort(const std::string& text, std::string* host, int* port) {
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 >= text.size()) {
    throw InvalidArgument("malformed address '" + text + "' (expected host:port)");
  }
  char* end = nullptr;
  long value = std::strtol(text.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || value <= 0 || value > 65535) {
    throw InvalidArgument("malformed port in address '" + text + "'");
  }
  *host = text.substr(0, colon);
  *port = static_cast<int>(value);
}

}  // namespace net
}  // namespace hora
