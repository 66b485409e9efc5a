#include "core/transport/hierarchical_communicator.h"

#include <algorithm>
#include <cstdint>
#include <sstream>

#include "core/common/logging.h"

namespace hora {

namespace {

// A Communicator as the collectives' Group (core/collectives/hierarchical.h), which declares the
// few collectives the hierarchical algorithms compose without depending on this folder.
class CommunicatorGroup final : public collectives::Group {
 public:
  explicit CommunicatorGroup(Communicator& comm) : comm_(comm) {}

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    comm_.allreduce(buf, count, dtype, op);
  }
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) override {
    comm_.allgatherv(in, out, bytesPerRank);
  }
  void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                 const std::vector<size_t>& recvBytes) override {
    comm_.alltoallv(in, sendBytes, out, recvBytes);
  }

 private:
  Communicator& comm_;
};

}  // namespace

HierarchicalCommunicator::HierarchicalCommunicator(std::unique_ptr<Communicator> flat,
                                                   std::unique_ptr<Communicator> local,
                                                   std::unique_ptr<Communicator> cross,
                                                   collectives::HostLayout layout, Choice choice)
    : flat_(std::move(flat)),
      local_(std::move(local)),
      cross_(std::move(cross)),
      layout_(std::move(layout)),
      choice_(choice) {}

void HierarchicalCommunicator::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (!choice_.allreduce) return flat_->allreduce(buf, count, dtype, op);
  CommunicatorGroup localGroup(*local_), crossGroup(*cross_);
  collectives::allreduceHierarchical(localGroup, crossGroup, buf, count, dtype, op, scratch_);
}

void HierarchicalCommunicator::allgatherv(const void* in, void* out,
                                          const std::vector<size_t>& bytesPerRank) {
  if (!choice_.allgather) return flat_->allgatherv(in, out, bytesPerRank);
  CommunicatorGroup localGroup(*local_), crossGroup(*cross_);
  collectives::allgathervHierarchical(localGroup, crossGroup, layout_, in, out, bytesPerRank,
                                      scratch_);
}

namespace {

// Why the flat path runs although some rank asked for `what` ("" when it may run).
std::string whyNot(int asking, int size, const char* variable, const std::string& hostsWhyNot) {
  if (asking < size) {
    return std::to_string(asking) + " of " + std::to_string(size) + " ranks set " + variable;
  }
  return hostsWhyNot;
}

}  // namespace

std::unique_ptr<Communicator> makeGlobalCommunicator(Communicator& world,
                                                     const std::vector<int>& all,
                                                     HierarchicalCommunicator::Choice requested,
                                                     const collectives::RankPlace& mine,
                                                     const HostLocalFactory& hostLocal) {
  const int size = world.size();
  if (size == 1) return world.subset(all);
  // Each rank's requests and place, gathered on every rank (5 x int32 each).
  int32_t own[5] = {requested.allreduce ? 1 : 0, requested.allgather ? 1 : 0, mine.host,
                    mine.hostCount, mine.hostRanks};
  std::vector<int32_t> every(5 * static_cast<size_t>(size));
  world.allgatherv(own, every.data(), std::vector<size_t>(size, sizeof(own)));
  std::vector<collectives::RankPlace> places(size);
  int askReduce = 0, askGather = 0;
  for (int r = 0; r < size; ++r) {
    const int32_t* e = &every[5 * static_cast<size_t>(r)];
    askReduce += e[0];
    askGather += e[1];
    places[r] = {e[2], e[3], e[4]};
  }
  if (askReduce == 0 && askGather == 0) return world.subset(all);
  const collectives::HostGroups groups = collectives::groupHosts(places);
  const bool lead = world.rank() == 0;
  HierarchicalCommunicator::Choice choice;
  if (askReduce > 0) {
    std::string why = whyNot(askReduce, size, "HORA_HIERARCHICAL_ALLREDUCE", groups.whyNot);
    choice.allreduce = why.empty();
    if (lead && !why.empty()) HORA_LOG(Info, "hierarchical allreduce not used: " << why);
  }
  if (askGather > 0) {
    std::string why = whyNot(askGather, size, "HORA_HIERARCHICAL_ALLGATHER", groups.whyNot);
    choice.allgather = why.empty();
    if (lead && !why.empty()) HORA_LOG(Info, "hierarchical allgather not used: " << why);
  }
  if (!choice.allreduce && !choice.allgather) return world.subset(all);
  collectives::HostLayout layout = collectives::layoutFor(groups, world.rank());
  std::vector<int> cross;
  for (const auto& host : layout.hosts) cross.push_back(host[layout.index]);
  std::sort(cross.begin(), cross.end());
  const int perHost = static_cast<int>(layout.hosts[0].size());
  std::unique_ptr<Communicator> local;
  std::string localWhyNot;
  if (hostLocal) {
    local = hostLocal(layout.host, layout.index, layout.hosts[layout.host], &localWhyNot);
  }
  if (!local) local = world.subset(layout.hosts[layout.host]);
  auto flat = world.subset(all);
  auto crossComm = world.subset(cross);
  if (lead) {
    std::ostringstream shape;
    shape << layout.hosts.size() << " hosts x " << perHost << " ranks; within rank 0's host over "
          << local->backendName() << ", across hosts over " << crossComm->backendName();
    if (choice.allreduce) HORA_LOG(Info, "hierarchical allreduce: " << shape.str());
    if (choice.allgather) HORA_LOG(Info, "hierarchical allgather: " << shape.str());
    if (!localWhyNot.empty()) {
      HORA_LOG(Info, "within rank 0's host the hierarchical steps stay on " << local->backendName()
                                                                            << ": " << localWhyNot);
    }
  }
  return std::make_unique<HierarchicalCommunicator>(
      std::move(flat), std::move(local), std::move(crossComm), std::move(layout), choice);
}

}  // namespace hora
