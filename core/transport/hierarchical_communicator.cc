#include "core/transport/hierarchical_communicator.h"

#include <algorithm>
#include <cstdint>

#include "core/common/logging.h"

namespace hora {

HierarchicalCommunicator::HierarchicalCommunicator(std::unique_ptr<Communicator> flat,
                                                   std::unique_ptr<Communicator> local,
                                                   std::unique_ptr<Communicator> cross)
    : flat_(std::move(flat)), local_(std::move(local)), cross_(std::move(cross)) {}

void HierarchicalCommunicator::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  collectives::allreduceHierarchical(*local_, *cross_, buf, count, dtype, op, scratch_);
}

std::unique_ptr<Communicator> makeGlobalCommunicator(Communicator& world,
                                                     const std::vector<int>& all, bool requested,
                                                     const collectives::RankPlace& mine) {
  const int size = world.size();
  if (size == 1) return world.subset(all);
  // Each rank's request and place, gathered on every rank (4 x int32 each).
  int32_t own[4] = {requested ? 1 : 0, mine.host, mine.hostCount, mine.hostRanks};
  std::vector<int32_t> every(4 * static_cast<size_t>(size));
  world.allgatherv(own, every.data(), std::vector<size_t>(size, sizeof(own)));
  std::vector<collectives::RankPlace> places(size);
  int requesting = 0;
  for (int r = 0; r < size; ++r) {
    requesting += every[4 * r];
    places[r] = {every[4 * r + 1], every[4 * r + 2], every[4 * r + 3]};
  }
  if (requesting == 0) return world.subset(all);
  std::string whyNot;
  collectives::HostGroups groups;
  if (requesting < size) {
    whyNot = std::to_string(requesting) + " of " + std::to_string(size) +
             " ranks set HORA_HIERARCHICAL_ALLREDUCE";
  } else {
    groups = collectives::groupHosts(places);
    whyNot = groups.whyNot;
  }
  if (!whyNot.empty()) {
    if (world.rank() == 0) HORA_LOG(Info, "hierarchical allreduce not used: " << whyNot);
    return world.subset(all);
  }
  const int me = world.rank();
  std::vector<int> local, cross;
  int index = -1;  // this rank's position on its host
  for (const auto& host : groups.hosts) {
    for (size_t i = 0; i < host.size(); ++i) {
      if (host[i] == me) {
        local = host;
        index = static_cast<int>(i);
      }
    }
  }
  for (const auto& host : groups.hosts) cross.push_back(host[index]);
  std::sort(cross.begin(), cross.end());
  if (me == 0) {
    HORA_LOG(Info, "hierarchical allreduce: " << groups.hosts.size() << " hosts x " << local.size()
                                              << " ranks");
  }
  auto flat = world.subset(all);
  auto localComm = world.subset(local);
  auto crossComm = world.subset(cross);
  return std::make_unique<HierarchicalCommunicator>(std::move(flat), std::move(localComm),
                                                    std::move(crossComm));
}

}  // namespace hora
