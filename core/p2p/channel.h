#pragma once
// Channel: tagged point-to-point messages between the ranks of a job over TCP (what
// torch.distributed's send/recv/isend/irecv need), independent of the collective engine: no
// negotiation with other ranks, no background loop.
//
//   Channel ch(rank, size, secret, "127.0.0.1");   // listens, starts the I/O thread
//   ...exchange ch.address() with every rank (the caller's store)...
//   ch.setPeers(addresses);                         // index = rank
//   ch.send(buf, n, dst, tag, timeout);  int src = ch.recv(buf, n, kAnySource, tag, timeout);
//
// Contract:
// - Messages are byte buffers with an int64 tag. From one source with one tag they are received
//   in the order they were sent; recv(src, tag) takes the oldest matching message, recv(kAnySource,
//   tag) the oldest from any rank (mailbox.h has the rules). A message of M bytes for a receive of
//   N != M bytes fails that receive with InvalidArgument and is consumed.
// - Each direction of a pair of ranks uses the connection its sender opened on its first send
//   (sender.h); the receiving side admits one connection per rank, authenticated with the job
//   secret (receiver.h). Unexpected messages (sent before their receive) are kept without a cap.
// - Threads: send and recv are safe from any number of threads at once; sends to one rank are
//   written whole, one after the other. Waits block on condition variables and poll(2), never
//   spin. The channel owns one I/O thread.
// - Timeouts: every send and recv takes one (kNoTimeout waits without limit) and throws
//   TimeoutError naming the peer (or "any rank") and the tag when it runs out. A recv that times
//   out while its message is half-arrived gives the message back for a later recv.
// - A peer whose connection ends (EOF, reset, malformed bytes) fails the receives waiting for it,
//   and later ones once the messages that arrived before the end are taken, with IoError "rank r
//   closed its point-to-point connection ..."; a recv from any rank fails so only when every other
//   rank's connection has ended, otherwise at its timeout. Sends to such a rank throw IoError.
// - close() (idempotent; also the destructor) joins the I/O thread, fails every pending and later
//   send and recv with ShutdownError, and returns once they have all returned: after it, nothing
//   touches a caller's buffer. Destroy the channel only once no call can still enter it.
// - Invalid arguments (a rank out of range, send/recv to this rank, a second set of addresses)
//   throw InvalidArgument at once.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "core/common/time.h"
#include "core/p2p/mailbox.h"
#include "core/p2p/receiver.h"
#include "core/p2p/sender.h"

namespace hora {
namespace p2p {

constexpr Millis kNoTimeout = Millis::max();

class Channel {
 public:
  // listenHost: "" (or "0.0.0.0") listens on every interface and advertises this host's address;
  // an address, host name or interface name ("eth0") listens on that address only.
  Channel(int rank, int size, const std::string& secret, const std::string& listenHost);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "host:port" that the other ranks connect to.
  const std::string& address() const { return address_; }
  // Every rank's address(), index = rank; before the first send.
  void setPeers(const std::vector<std::string>& addresses);
  void send(const void* data, size_t bytes, int dst, int64_t tag, Millis timeout);
  // Fills data with one message from src (or kAnySource) with tag; returns the sender's rank.
  int recv(void* data, size_t bytes, int src, int64_t tag, Millis timeout);
  void close();

 private:
  class Call;

  void checkPeer(int peer, const char* doing) const;
  std::string me() const { return "rank " + std::to_string(rank_); }

  const int rank_;
  const int size_;
  std::string address_;
  Mailbox mailbox_;
  Sender sender_;
  Receiver receiver_;      // after mailbox_, which its thread feeds
  std::mutex closeMutex_;  // one close() at a time; a second waits for the first
  std::mutex callsMutex_;
  std::condition_variable callsDone_;
  int activeCalls_ = 0;  // guarded by callsMutex_
  bool closed_ = false;  // guarded by callsMutex_
};

}  // namespace p2p
}  // namespace hora
