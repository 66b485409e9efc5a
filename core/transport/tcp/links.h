#pragma once
// TcpLinks: the TCP implementation of collectives::Links (core/collectives/links.h), over the data
// links. One TcpPeerSockets holds a socket per world rank and is shared by the world communicator
// and every subset view of it; a TcpLinks maps its group's ranks onto world ranks. A link is
// opened the first time a collective moves bytes to or from that peer (link_opener.h), and every
// wait also serves the links other ranks open to this one.
//
// Waits poll for up to the spin budget (yielding the core), then block in poll(2) for at most
// the op timeout; error messages name world ranks and the collective in progress (setOp). A peer
// whose host stops answering fails the wait sooner, after unreachableAfter: keepalive fails the
// socket, and a blocked wait checks each second that what it sent is acknowledged (TCP_INFO);
// the error names the host's address and the ranks there. Once any collective fails,
// markFailed() shuts every data socket down and closes the listener: the peers blocked on this
// rank see EOF at once, and those opening a link to it a refusal, instead of waiting out their
// timeouts; the communicators that share the sockets refuse further work. Single-threaded.
#include <memory>
#include <string>
#include <vector>

#include "core/collectives/links.h"
#include "core/collectives/scratch_buffers.h"
#include "core/common/time.h"
#include "core/net/socket.h"
#include "core/transport/tcp/link_opener.h"

namespace hora {
namespace tcp {

struct TcpPeerSockets {
  int worldRank = 0;
  int worldSize = 1;
  Millis opTimeout{60000};
  Micros spin{0};                      // polling before a wait blocks (core/common/spin.h)
  std::vector<net::Socket> sockets;    // by world rank; invalid for this rank and links not open
  std::vector<std::string> addresses;  // by world rank: the peer's host ("" unknown)
  Millis unreachableAfter{8000};       // keepalive silence that fails a socket (ETIMEDOUT)
  Millis keepaliveIdle{3000};          // silence before the first keepalive probe
  std::string failure;                 // why the mesh became unusable ("" while healthy)
  std::unique_ptr<LinkOpener> opener;  // opens the links not made yet; null for one rank
  collectives::ScratchBuffers scratch;

  void markFailed(const std::string& why);
  // Takes a link just made (at set-up or by the opener): keepalive on, the peer's address noted.
  void adopt(int rank, net::Socket socket);
  // "the host of rank 3 (10.0.0.3) is unreachable: no answer for 8 s while sending during
  // allreduce; ranks 2, 3 run there; ...".
  std::string unreachableText(int rank, const char* doing, const char* op) const;
  // The world ranks this rank has a data link with.
  std::vector<int> linkedRanks() const;
};

class TcpLinks : public collectives::Links {
 public:
  TcpLinks(std::shared_ptr<TcpPeerSockets> peers, std::vector<int> worldRanks, int rank);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(worldRanks_.size()); }
  size_t trySend(int peer, const void* data, size_t bytes) override;
  size_t tryRecv(int peer, void* data, size_t bytes) override;
  void waitAny(const Want* wants, size_t count) override;
  uint8_t* scratch(int slot, size_t bytes) override;

  void setOp(const char* op) { op_ = op; }
  int worldRank(int peer) const { return worldRanks_[peer]; }
  const std::vector<int>& worldRanks() const { return worldRanks_; }
  TcpPeerSockets& peers() { return *peers_; }

 private:
  int fdOf(int peer);  // opens the link on first use
  [[noreturn]] void closed(int peer, const net::IoResult& r, const char* direction) const;
  std::string alsoClosed(int peer) const;  // "" or "; the connections to rank 3 are closed too"
  [[noreturn]] void unreachable(int peer, const char* direction) const;
  void checkAcknowledged(const Want* wants, size_t count);

  std::shared_ptr<TcpPeerSockets> peers_;
  std::vector<int> worldRanks_;
  int rank_;
  const char* op_ = "collective";
  std::vector<pollfd> pollSet_;
};

}  // namespace tcp
}  // namespace hora
