#pragma once
// POSIX socket helpers shared by the TCP transport, the TCP store and the store bootstrap over MPI.
//
// Contract:
// - Socket owns one file descriptor (move-only) and closes it on destruction.
// - sendSome/recvSome never block: they move what the kernel accepts now and report WouldBlock
//   otherwise, Closed on EOF / reset, Failed on other errors (errno in IoResult::error).
// - Every wait here blocks in poll(2) up to a deadline; nothing spins. EINTR is retried.
// - Functions are thread-safe in the sense of the underlying syscalls; sharing one Socket between
//   threads is the caller's responsibility.
#include <poll.h>

#include <cstddef>
#include <string>

#include "core/common/time.h"

namespace hora {
namespace net {

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  ~Socket() { reset(); }
  Socket(Socket&& other) noexcept : fd_(other.release()) {}
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release();
  void reset();
  // Ends both directions without closing the descriptor: a peer blocked on us sees EOF at once.
  void shutdownBoth();

 private:
  int fd_ = -1;
};

enum class IoStatus { Ok, WouldBlock, Closed, Failed };

struct IoResult {
  IoStatus status = IoStatus::Ok;
  size_t bytes = 0;
  int error = 0;  // errno for Closed (when reset) and Failed
};

IoResult sendSome(int fd, const void* data, size_t bytes);
IoResult recvSome(int fd, void* data, size_t bytes);
// "connection closed by peer", "Connection reset by peer", ...
std::string describe(const IoResult& r);

// The numeric address of a connected socket's peer ("10.0.0.2"), or "" when it has none.
std::string peerAddress(int fd);

// Kernel keepalive that notices an unreachable peer host: probes after `idle` of silence, then
// every `interval`, and `count` unanswered ones fail the socket with ETIMEDOUT. A live peer's
// kernel answers them whatever its process does (busy, stopped), so only a host that is down or
// cut off fails. Does nothing to a socket that is not TCP. Throws IoError when refused.
void setKeepalive(int fd, Millis idle, Millis interval, int count);

void setNonBlocking(int fd);
// TCP_NODELAY, keep-alive and large kernel buffers: for every connection the engine opens.
void tuneConnection(int fd);

// Binds host:port (host "" or "0.0.0.0" = every interface, port 0 = any free port), listens, and
// returns the non-blocking listening socket. Throws IoError.
Socket listenOn(const std::string& host, int port, int* boundPort);
// Accepts one pending connection (non-blocking, tuned) or returns an invalid Socket when none is
// pending. peer receives "a.b.c.d:port".
Socket acceptPending(int listenFd, std::string* peer);
// Starts a non-blocking connect. On return *pending tells whether completion must be awaited
// (POLLOUT, then connectResult()). Throws IoError when the host does not resolve; returns an
// invalid Socket (and sets *error) when the connect failed at once.
Socket startConnect(const std::string& host, int port, bool* pending, int* error);
// 0 when the non-blocking connect on fd succeeded, else the errno.
int connectResult(int fd);
// Connects with retries (the listener may not be up yet) until the deadline. Throws IoError
// naming host:port and the last error on timeout.
Socket connectWithRetry(const std::string& host, int port, Clock::time_point deadline);

// Blocks until fd reports one of events (or an error/hangup); false when the deadline passed.
bool waitFor(int fd, short events, Clock::time_point deadline);
// Milliseconds to pass to poll(2) for a deadline: 0 when passed, capped to fit in int.
int pollTimeoutMs(Clock::time_point deadline);
// Whole-buffer transfers on a non-blocking socket, waiting in poll() up to the deadline.
// Throw IoError (naming `what`) on EOF/error, TimeoutError at the deadline.
void sendAll(int fd, const void* data, size_t bytes, Clock::time_point deadline,
             const std::string& what);
void recvAll(int fd, void* data, size_t bytes, Clock::time_point deadline, const std::string& what);

// The address other hosts should use to reach a listener on this host. listenHost may be an
// address, a host name, an interface name ("eth0"), or "" for this host's resolved name
// (falling back to 127.0.0.1).
std::string advertisedHost(const std::string& listenHost);
// The address a server that clients reach at `host` should bind: 127.0.0.1 (or the given loopback
// address) for a loopback host; host's address when it is one of this machine's interfaces; ""
// (every interface) when it is not, or when a name that is not "localhost" resolves to a loopback
// address here (a hosts file mapping this host's name to 127.0.1.1: the address other hosts use
// cannot be known). Throws IoError when host does not resolve.
std::string serverBindHost(const std::string& host);
// serverBindHost, retrying a name that does not resolve yet (this host's own name may be
// published after it starts: a Kubernetes pod's) until the deadline; then throws its IoError.
std::string serverBindHost(const std::string& host, Clock::time_point deadline);
// True for "localhost" and 127.0.0.0/8 literals.
bool isLoopbackHost(const std::string& host);
// "host:port" <-> parts. parseHostPort throws InvalidArgument on malformed input.
std::string joinHostPort(const std::string& host, int port);
void parseHostPort(const std::string& text, std::string* host, int* port);

}  // namespace net
}  // namespace hora
