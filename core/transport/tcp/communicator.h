#pragma once
// TcpCommunicator: the Communicator of the built-in TCP transport, for the world or for a subset
// of it. Views made by subset() share the world's sockets (TcpPeerSockets) and differ only in the
// mapping of their ranks to world ranks.
//
// The collectives, their argument checks and their failure rule come from LinksCommunicator, over
// TcpLinks. A failure inside a collective shuts the shared mesh down: every later call on this
// communicator or any view of it throws IoError quoting the first failure, and peers blocked on
// this rank fail fast. Used by one thread at a time, as Communicator requires.
#include <memory>
#include <string>
#include <vector>

#include "core/transport/links_communicator.h"
#include "core/transport/tcp/links.h"

namespace hora {
namespace tcp {

class TcpCommunicator : public LinksCommunicator {
 public:
  // worldRanks[i] is the world rank of member i; rank is this process's index in worldRanks.
  TcpCommunicator(std::shared_ptr<TcpPeerSockets> peers, std::vector<int> worldRanks, int rank);

  std::string backendName() const override { return "tcp"; }
  std::unique_ptr<Communicator> subset(const std::vector<int>& ranks) override;
  // The world ranks this process holds a data link with, shared by every view (links open on
  // first use: link_opener.h). Same thread as the collectives.
  std::vector<int> linkedRanks() const { return peers_->linkedRanks(); }

 protected:
  collectives::Links& links() override { return links_; }
  int worldRank() const override { return peers_->worldRank; }
  std::string failure() const override { return peers_->failure; }
  void markFailed(const std::string& why) override { peers_->markFailed(why); }
  void setOp(const char* op) override { links_.setOp(op); }

 private:
  std::shared_ptr<TcpPeerSockets> peers_;
  TcpLinks links_;
};

}  // namespace tcp
}  // namespace hora
