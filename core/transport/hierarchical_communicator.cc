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

// One collective's verdict from every rank's preference for it.
struct Verdict {
  bool run = false;
  bool asked = false;  // every rank set On (not left it to the engine)
  std::string whyNot;  // logged: why a path that some rank set On does not run
};

Verdict decide(const std::vector<Preference>& prefs, const collectives::HostGroups& groups,
               const char* variable) {
  const int size = static_cast<int>(prefs.size());
  const int on = static_cast<int>(std::count(prefs.begin(), prefs.end(), Preference::On));
  const int off = static_cast<int>(std::count(prefs.begin(), prefs.end(), Preference::Off));
  auto ranksSet = [&](int n, const char* value) {
    return std::to_string(n) + " of " + std::to_string(size) + " ranks set " + variable + value;
  };
  Verdict v;
  if (off > 0) {
    if (on > 0) v.whyNot = ranksSet(off, "=0");
    return v;
  }
  const bool hostsAllow = groups.whyNot.empty();
  if (on == size) {
    v.run = v.asked = hostsAllow;
    v.whyNot = groups.whyNot;
    return v;
  }
  // Left to the engine: a host of one rank has nothing to share within it, so the flat path
  // crosses the links no more often and saves the two local steps.
  v.run = hostsAllow && groups.hosts[0].size() >= 2;
  if (on > 0 && !v.run) v.whyNot = hostsAllow ? ranksSet(on, "") : groups.whyNot;
  return v;
}

// Every rank's preferences and place, as every rank gathered them.
struct Gathered {
  std::vector<Preference> reduce, gather;
  std::vector<collectives::RankPlace> places;
};

// Every rank decides from the same gathered inputs, so all reach the same verdict: a hierarchical
// collective on some ranks and a flat one on others would never match.
Gathered gatherPreferences(Communicator& world, const HierarchyRequest& requested,
                           const collectives::RankPlace& mine) {
  const int size = world.size();
  // 5 x int32 from each rank.
  int32_t own[5] = {static_cast<int32_t>(requested.allreduce),
                    static_cast<int32_t>(requested.allgather), mine.host, mine.hostCount,
                    mine.hostRanks};
  std::vector<int32_t> every(5 * static_cast<size_t>(size));
  world.allgatherv(own, every.data(), std::vector<size_t>(size, sizeof(own)));
  Gathered g{std::vector<Preference>(size), std::vector<Preference>(size),
             std::vector<collectives::RankPlace>(size)};
  for (int r = 0; r < size; ++r) {
    const int32_t* e = &every[5 * static_cast<size_t>(r)];
    g.reduce[r] = static_cast<Preference>(e[0]);
    g.gather[r] = static_cast<Preference>(e[1]);
    g.places[r] = {e[2], e[3], e[4]};
  }
  return g;
}

// Rank 0's one line per path chosen: the shape, the backends, and how to turn it off.
void logChosen(const Verdict& reduce, const Verdict& gather, const collectives::HostLayout& layout,
               const Communicator& local, const Communicator& cross,
               const std::string& localWhyNot) {
  std::ostringstream shape;
  // Every host has the same number of ranks here (groupHosts() refuses otherwise), so host 0's
  // count is every host's.
  shape << layout.hosts.size() << " hosts x " << layout.hosts[0].size()
        << " ranks; within rank 0's host over " << local.backendName() << ", across hosts over "
        << cross.backendName();
  auto why = [](const Verdict& v, const char* variable) {
    return v.asked ? std::string()
                   : std::string(" (chosen by the engine; ") + variable + "=0 keeps it flat)";
  };
  if (reduce.run) {
    HORA_LOG(Info, "hierarchical allreduce: " << shape.str()
                                              << why(reduce, "HORA_HIERARCHICAL_ALLREDUCE"));
  }
  if (gather.run) {
    HORA_LOG(Info, "hierarchical allgather: " << shape.str()
                                              << why(gather, "HORA_HIERARCHICAL_ALLGATHER"));
  }
  if (!localWhyNot.empty()) {
    HORA_LOG(Info, "within rank 0's host the hierarchical steps stay on " << local.backendName()
                                                                          << ": " << localWhyNot);
  }
}

}  // namespace

std::unique_ptr<Communicator> makeGlobalCommunicator(Communicator& world,
                                                     const std::vector<int>& all,
                                                     const HierarchyRequest& requested,
                                                     const collectives::RankPlace& mine,
                                                     const HostLocalFactory& hostLocal) {
  // One rank has no host to share and nothing to gather; the flat view is all it needs.
  if (world.size() == 1) return world.subset(all);
  const Gathered prefs = gatherPreferences(world, requested, mine);
  const collectives::HostGroups groups = collectives::groupHosts(prefs.places);
  const Verdict reduce = decide(prefs.reduce, groups, "HORA_HIERARCHICAL_ALLREDUCE");
  const Verdict gather = decide(prefs.gather, groups, "HORA_HIERARCHICAL_ALLGATHER");
  // Only rank 0 logs the verdict: it is the same on every rank, and one line per job is enough.
  const bool lead = world.rank() == 0;
  if (lead && !reduce.whyNot.empty()) {
    HORA_LOG(Info, "hierarchical allreduce not used: " << reduce.whyNot);
  }
  if (lead && !gather.whyNot.empty()) {
    HORA_LOG(Info, "hierarchical allgather not used: " << gather.whyNot);
  }
  if (!reduce.run && !gather.run) return world.subset(all);
  HierarchicalCommunicator::Choice choice{reduce.run, gather.run, reduce.asked};
  collectives::HostLayout layout = collectives::layoutFor(groups, world.rank());
  std::vector<int> cross;
  // The cross group links the ranks that hold this rank's local index on every host.
  for (const auto& host : layout.hosts) cross.push_back(host[layout.index]);
  // subset() takes ranks in ascending order.
  std::sort(cross.begin(), cross.end());
  std::unique_ptr<Communicator> local;
  std::string localWhyNot;
  // Every rank of each host calls the factory, and a host's ranks get one verdict from it, so
  // either all of them use the host-local communicator or none does.
  if (hostLocal) {
    local = hostLocal(layout.host, layout.index, layout.hosts[layout.host], &localWhyNot);
  }
  // Without a host-local communicator (no shared memory, say) the local steps run over the world's
  // own connections.
  if (!local) local = world.subset(layout.hosts[layout.host]);
  // The flat view still carries every collective that does not run hierarchically.
  auto flat = world.subset(all);
  auto crossComm = world.subset(cross);
  if (lead) logChosen(reduce, gather, layout, *local, *crossComm, localWhyNot);
  return std::make_unique<HierarchicalCommunicator>(
      std::move(flat), std::move(local), std::move(crossComm), std::move(layout), choice);
}

}  // namespace hora
