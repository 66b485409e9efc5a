#pragma once
// Sender: the sending half of a point-to-point channel: one connection per destination rank,
// opened by this rank on the first send to it, and the writes of whole messages on it.
//
// Contract:
// - Connections are made lazily: the first send to a rank connects to its address (non-blocking
//   connect, retried with back-off while the peer is not reachable) and runs the handshake as a
//   PeerKind::P2p connector that must reach exactly that rank, all within the send's deadline. A
//   handshake the peer refuses or that proves a wrong secret or rank is final: that send and every
//   later one to the rank throw IoError.
// - Sends to one rank take turns (a per-rank mutex and flag): each message (header and payload)
//   is written whole, so messages from concurrent senders never interleave. Sends to different
//   ranks run in parallel. Any number of threads may send at once.
// - Every wait (for the turn at a rank, connect, a full socket buffer) ends at the send's deadline
//   (TimeoutError) or at interrupt() (ShutdownError); waits block on a condition variable (the
//   turn) or in poll(2) on the socket and an eventfd, never spin. A send that times out before
//   writing anything leaves the connection as it was; one that times out part-way through a
//   message closes the connection (a half-sent message cannot be taken back), and later sends to
//   that rank throw IoError.
// - A destination whose connection ended (reset, or EOF seen before a write) fails this and later
//   sends with IoError "rank r closed its point-to-point connection ...". Connections are not
//   re-made: the receiving side admits one connection per rank (receiver.h).
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/common/time.h"
#include "core/net/socket.h"

namespace hora {
namespace p2p {

class Sender {
 public:
  Sender(int rank, int size, const std::string& secret);
  ~Sender();
  Sender(const Sender&) = delete;
  Sender& operator=(const Sender&) = delete;

  // Every rank's "host:port", indexed by rank (this rank's own entry is not used). Once: a second
  // call with other addresses throws InvalidArgument, the same list again is a no-op.
  void setPeers(const std::vector<std::string>& addresses);
  // Writes one message (tag, bytes at data) to rank dst, connecting first when needed. Returns
  // once the message is handed to the kernel whole. timeout only words the errors; the deadline
  // bounds the call. Throws InvalidArgument (no addresses yet), TimeoutError, IoError,
  // ShutdownError.
  void send(const void* data, size_t bytes, int dst, int64_t tag, Clock::time_point deadline,
            Millis timeout);
  // Makes every send in progress, and every later one, throw ShutdownError.
  void interrupt();
  // Closes every connection. Only once no send is in progress (after interrupt()).
  void closeConnections();

 private:
  struct Peer;
  class Turn;
  enum class Wait { Ready, TimedOut, Interrupted };

  Wait waitReady(int fd, short events, Clock::time_point deadline) const;
  void connect(Peer& peer, int dst, Clock::time_point deadline, const std::string& what,
               const std::string& after);
  bool handshake(Peer& peer, net::Socket& sock, int dst, Clock::time_point deadline,
                 const std::string& what, std::string* error);
  void write(Peer& peer, const void* data, size_t bytes, int dst, int64_t tag,
             Clock::time_point deadline, const std::string& what, const std::string& after);
  [[noreturn]] void interrupted(const std::string& what) const;
  std::string me() const { return "rank " + std::to_string(rank_); }

  const int rank_;
  const int size_;
  const std::string secret_;
  int interruptFd_ = -1;  // written once by interrupt(), never drained: wakes every poll
  std::atomic<bool> interrupted_{false};
  std::mutex addressesMutex_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<Peer>> peers_;
};

}  // namespace p2p
}  // namespace hora
