// Start-up: the rendezvous store, the world's connections, and the static process sets.
#include "core/runtime/world_links.h"

#include <algorithm>

#include "core/common/errors.h"
#include "core/store/memory_store.h"
#include "core/store/prefix_store.h"
#include "core/transport/agree.h"
#include "core/transport/backends.h"
#include "core/transport/hierarchical_communicator.h"
#include "core/transport/rendezvous_store.h"
#include "core/transport/solo_board.h"
#include "core/transport/transport.h"

namespace hora {
namespace {

ConnectOptions connectOptions(const RuntimeOptions& options, const Settings& settings) {
  ConnectOptions co;
  co.rank = options.topology.rank;
  co.size = options.topology.size;
  co.secret = options.secret;
  co.listenHost = options.listenHost;
  co.startTimeout = secondsToMillis(settings.startTimeoutSeconds);
  co.opTimeout = secondsToMillis(settings.timeoutSeconds);
  co.spin = Micros(settings.spinMicroseconds);
  co.mpiComm = options.mpiComm;
  co.shmRingBytes = static_cast<size_t>(settings.shmRingBytes);
  co.shmWindowBytes = static_cast<size_t>(settings.shmWindowBytes);
  co.shmArenaBytes = static_cast<size_t>(settings.shmArenaBytes);
  if (settings.shmHostByName) co.shmHostName = envString("HOSTNAME");
  co.shmControl = settings.shmControl;
  co.controlFanout = static_cast<int>(settings.controlFanout);
  return co;
}

// Only TCP needs the store: MPI connects the ranks itself (mpirun). TCP beside MPI under mpirun,
// where no launcher serves a store, bootstraps one over MPI and takes its secret. Returns the
// generation that keeps this init's keys apart from earlier ones in a long-lived store; a
// bootstrapped store is new for every init and needs none (and the ranks' counts of inits may
// differ: init(comm=[...]) runs on some ranks only).
std::string openStore(const RuntimeOptions& options, bool usesTcp, bool usesMpi, ConnectOptions& co,
                      WorldLinks& links) {
  const bool noStore = options.storeHost.empty();
  const int size = options.topology.size;
  if (noStore && (size == 1 || !usesTcp)) {
    links.baseStore = std::make_unique<MemoryStore>();
    return std::to_string(options.generation);
  }
  co.storeOwner = options.storeOwner;
  if (noStore && usesMpi) {
    co.storeOwner = StoreOwner::Rank0;
    BootstrappedStore bootstrapped = bootstrapStoreOverMpi(co);
    links.storeServer = std::move(bootstrapped.server);
    links.baseStore = std::move(bootstrapped.client);
    co.secret = bootstrapped.secret;
    return "-bootstrapped";
  }
  if (noStore || options.storePort <= 0) {
    throw InvalidArgument("a job of " + std::to_string(size) +
                          " ranks needs a rendezvous store: start it with horarun, or set "
                          "HORA_RENDEZVOUS_ADDR and HORA_RENDEZVOUS_PORT (or MASTER_ADDR and "
                          "MASTER_PORT)");
  }
  links.baseStore = storeCall(co, "connecting to it", [&] {
    return std::make_unique<TcpStoreClient>(options.storeHost, options.storePort, options.secret,
                                            co.startTimeout);
  });
  return std::to_string(options.generation);
}

// "[[0, 2], [1, 3]]": the sets in the order given (their ids follow it), each set's ranks sorted.
std::string describeSets(const std::vector<std::vector<int>>& sets) {
  std::string out = "[";
  for (size_t i = 0; i < sets.size(); ++i) {
    std::vector<int> ranks = sets[i];
    std::sort(ranks.begin(), ranks.end());
    out += i ? ", [" : "[";
    for (size_t j = 0; j < ranks.size(); ++j) out += (j ? ", " : "") + std::to_string(ranks[j]);
    out += "]";
  }
  return out + "]";
}

// When the world's data runs over TCP alone (not every rank on one host), the ranks of each host
// of a hierarchical path try a shared segment of their own for their local steps.
HostLocalFactory hostLocalFactory(WorldLinks& links, const Settings& settings) {
  return [&links, &settings](int host, int index, const std::vector<int>& hostRanks,
                             std::string* why) {
    const std::string& name = links.transportName;
    if (name == "tcp+shm") return std::unique_ptr<Communicator>();  // already shm
    if (name != "tcp") {
      *why = "shared memory runs beside TCP only (the job's transport is " + name + ")";
      return std::unique_ptr<Communicator>();
    }
    if (hostRanks.size() == 1) return std::unique_ptr<Communicator>();  // nothing to share
    ConnectOptions o = links.options;
    o.rank = index;
    o.size = static_cast<int>(hostRanks.size());
    PrefixStore hostStore(*links.store, "host" + std::to_string(host) + "/");
    return makeTransport("shm")->hostCommunicator(o, hostStore, settings.shmDisable, hostRanks,
                                                  why);
  };
}

}  // namespace

WorldLinks connectWorld(const RuntimeOptions& options, const Settings& settings) {
  WorldLinks links;
  auto data = makeTransport(options.transport);
  auto controller =
      makeTransport(options.controller.empty() ? options.transport : options.controller);
  links.transportName = transportLabel(*controller, *data);
  auto uses = [&](const char* name) { return controller->name() == name || data->name() == name; };
  ConnectOptions co = connectOptions(options, settings);
  std::string generation = openStore(options, uses("tcp"), uses("mpi"), co, links);
  links.store = std::make_unique<PrefixStore>(*links.baseStore, "hora/init" + generation + "/");
  Connection conn = connectRoles(*controller, *data, co, *links.store);
  // Ranks on one host move data through shared memory when TCP carries both roles (an explicit
  // MPI choice keeps MPI); negotiation moves there too unless a rank sets HORA_SHM_CONTROL=0.
  if (co.size > 1 && controller->name() == "tcp" && data->name() == "tcp" &&
      makeTransport("shm")->takeOverHost(conn, co, *links.store, settings.shmDisable)) {
    links.transportName = "tcp+shm";
  }
  links.options = co;
  links.world = std::move(conn.world);
  links.dataCapabilities = links.world->capabilities();
  links.sharedPool = links.world->sharedPool();
  links.control = std::move(conn.control);
  // A rank alone agrees with itself: its cached tensors then skip the coordinator, as on one host.
  if (co.size == 1 && !conn.board) conn.board = std::make_unique<SoloBoard>();
  // Where every rank allows it and autotune (which learns from what reaches the coordinator) is
  // off. Fusion then follows rank 0's threshold, as the coordinator's batches do.
  if (conn.board &&
      trueOnEveryRank(*links.world, settings.shmLocalAgreement && !settings.autotune)) {
    links.agreedFusionThreshold = rankZeroValue(*links.world, settings.fusionThreshold);
    links.agreement = std::make_unique<LocalAgreement>(std::move(conn.board),
                                                       Millis(settings.agreementHandOverMs),
                                                       secondsToMillis(settings.timeoutSeconds));
  }
  return links;
}

void addStaticProcessSets(WorldLinks& links, const Topology& topology, const Settings& settings,
                          const std::vector<std::vector<int>>& sets, ProcessSetTable& table) {
  Communicator& world = *links.world;
  requireSameOnEveryRank(world, describeSets(sets), "the process sets given to init");
  std::vector<int> all(topology.size);
  for (int i = 0; i < topology.size; ++i) all[i] = i;
  collectives::RankPlace place{topology.crossRank, topology.crossSize, topology.localSize};
  HierarchyRequest requested{settings.hierarchicalAllreduce, settings.hierarchicalAllgather};
  table.add(
      0, all,
      makeGlobalCommunicator(world, all, requested, place, hostLocalFactory(links, settings)));
  int id = 1;
  for (auto ranks : sets) {
    std::sort(ranks.begin(), ranks.end());
    bool valid = !ranks.empty() && ranks.front() >= 0 && ranks.back() < topology.size &&
                 std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end();
    if (!valid) throw InvalidArgument("a process set needs distinct ranks in [0, size)");
    if (table.findByRanks(ranks) >= 0) {
      throw InvalidArgument(
          "process set with these ranks is given twice (or equals the global set)");
    }
    bool member = std::binary_search(ranks.begin(), ranks.end(), topology.rank);
    table.add(id++, ranks, member ? world.subset(ranks) : nullptr);
  }
}

}  // namespace hora
