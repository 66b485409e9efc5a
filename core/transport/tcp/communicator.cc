#include "core/transport/tcp/communicator.h"

namespace hora {
namespace tcp {

TcpCommunicator::TcpCommunicator(std::shared_ptr<TcpPeerSockets> peers, std::vector<int> worldRanks,
                                 int rank)
    : peers_(peers), links_(std::move(peers), std::move(worldRanks), rank) {}

std::unique_ptr<Communicator> TcpCommunicator::subset(const std::vector<int>& ranks) {
  int mine = checkSubset(ranks);
  std::vector<int> world;
  // The subset's ranks are given in this communicator's numbering; they are translated so the new
  // view indexes the shared sockets by world rank.
  for (int r : ranks) world.push_back(links_.worldRank(r));
  return std::make_unique<TcpCommunicator>(peers_, std::move(world), mine);
}

}  // namespace tcp
}  // namespace hora
