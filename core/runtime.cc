#include "core/runtime.h"

#include <algorithm>

#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/common/spin.h"
#include "core/coordinator/enqueue_checks.h"
#include "core/runtime_impl.h"
#include "core/store/memory_store.h"
#include "core/store/prefix_store.h"
#include "core/store/tcp_store.h"
#include "core/transport/agree.h"
#include "core/transport/backends.h"
#include "core/transport/connect.h"
#include "core/transport/hierarchical_communicator.h"
#include "core/transport/nccl/communicator.h"
#include "core/transport/nccl/gpu_checks.h"
#include "core/transport/rendezvous_store.h"

namespace hora {

std::unique_ptr<Runtime> Runtime::start(const RuntimeOptions& options) {
  return std::make_unique<RuntimeImpl>(options);
}

RuntimeImpl::RuntimeImpl(const RuntimeOptions& options)
    : topology_(options.topology),
      settings_(options.settings),
      cycleTimeMs_(options.settings.cycleTimeMs),
      tuned_{options.settings.fusionThreshold, options.settings.cycleTimeMs},
      sets_(options.topology.rank),
      participant_(static_cast<size_t>(options.settings.cacheCapacity)),
      liveness_(options.topology.size, secondsToMillis(options.settings.timeoutSeconds)) {
  const Topology& t = topology_;
  if (t.size < 1 || t.rank < 0 || t.rank >= t.size) {
    throw InvalidArgument("invalid topology: rank " + std::to_string(t.rank) + " of " +
                          std::to_string(t.size));
  }
  setLogLevel(settings_.logLevel);
  setLogHideTime(settings_.logHideTime);
  // Measured: with more ranks than CPUs a caller's spin often ends in a sleep anyway, and
  // stopping it lowers the caller's CPU; with a CPU per rank the spin mostly succeeds and a fixed
  // one costs less (docs/tuning.md).
  if (settings_.spinAdaptive && oversubscribed(t.localSize)) {
    handleSpin_ = std::make_shared<AdaptiveSpin>(Micros(settings_.spinMicroseconds));
  }
  setLogRank(t.rank);  // for threads this runtime does not own
  LogRankScope logRank(t.rank);
  connect(options);
  addStaticProcessSets(options.processSets);
  if (t.rank == 0) {
    coordinator_ = std::make_unique<Coordinator>(
        t.size, sets_, settings_, static_cast<int>(options.processSets.size()) + 1, &timeline_);
    stalls_ = std::make_unique<StallInspector>(settings_);
    if (!settings_.timeline.empty() && settings_.timeline != "DYNAMIC") {
      startTimeline(settings_.timeline, settings_.timelineMarkCycles);
    }
  }
  running_ = true;
  thread_ = std::thread([this] {
    LogRankScope logRank(topology_.rank);
    loop();
  });
}

RuntimeImpl::~RuntimeImpl() { shutdown(); }

void RuntimeImpl::connect(const RuntimeOptions& options) {
  const Topology& t = topology_;
  auto data = makeTransport(options.transport);
  auto controller =
      makeTransport(options.controller.empty() ? options.transport : options.controller);
  transportName_ = transportLabel(*controller, *data);
  auto uses = [&](const char* name) { return controller->name() == name || data->name() == name; };
  ConnectOptions co;
  co.rank = t.rank;
  co.size = t.size;
  co.secret = options.secret;
  co.listenHost = options.listenHost;
  co.startTimeout = secondsToMillis(settings_.startTimeoutSeconds);
  co.opTimeout = secondsToMillis(settings_.timeoutSeconds);
  co.spin = Micros(settings_.spinMicroseconds);
  co.mpiComm = options.mpiComm;
  co.shmRingBytes = static_cast<size_t>(settings_.shmRingBytes);
  co.shmWindowBytes = static_cast<size_t>(settings_.shmWindowBytes);
  co.shmArenaBytes = static_cast<size_t>(settings_.shmArenaBytes);
  if (settings_.shmHostByName) co.shmHostName = envString("HOSTNAME");
  co.shmControl = settings_.shmControl;
  std::string generation = openStore(options, uses("tcp"), uses("mpi"), co);
  store_ = std::make_unique<PrefixStore>(*baseStore_, "hora/init" + generation + "/");
  Connection conn = connectRoles(*controller, *data, co, *store_);
  // Ranks on one host move data through shared memory when TCP carries both roles (an explicit
  // MPI choice keeps MPI); negotiation moves there too unless a rank sets HORA_SHM_CONTROL=0.
  if (t.size > 1 && controller->name() == "tcp" && data->name() == "tcp" &&
      makeTransport("shm")->takeOverHost(conn, co, *store_, settings_.shmDisable)) {
    transportName_ = "tcp+shm";
  }
  connectOptions_ = co;
  world_ = std::move(conn.world);
  dataCapabilities_ = world_->capabilities();
  sharedPool_ = world_->sharedPool();
  control_ = std::move(conn.control);
  // Cached tensors agreed on among the ranks (local_agreement.h), where every rank allows it and
  // autotune (which learns from what reaches the coordinator) is off. Fusion then follows rank
  // 0's threshold, as the coordinator's batches do.
  if (conn.board && trueOnEveryRank(*world_, settings_.shmLocalAgreement && !settings_.autotune)) {
    agreedFusionThreshold_ = rankZeroValue(*world_, settings_.fusionThreshold);
    agreement_ = std::make_unique<LocalAgreement>(std::move(conn.board),
                                                  Millis(settings_.agreementHandOverMs),
                                                  secondsToMillis(settings_.timeoutSeconds));
  }
}

// Only TCP needs the store: MPI connects the ranks itself (mpirun). TCP beside MPI under mpirun,
// where no launcher serves a store, bootstraps one over MPI and takes its secret. Returns the
// generation that keeps this init's keys apart from earlier ones in a long-lived store; a
// bootstrapped store is new for every init and needs none (and the ranks' counts of inits may
// differ: init(comm=[...]) runs on some ranks only).
std::string RuntimeImpl::openStore(const RuntimeOptions& options, bool usesTcp, bool usesMpi,
                                   ConnectOptions& co) {
  const bool noStore = options.storeHost.empty();
  if (noStore && (topology_.size == 1 || !usesTcp)) {
    baseStore_ = std::make_unique<MemoryStore>();
    return std::to_string(options.generation);
  }
  co.storeOwner = options.storeOwner;
  if (noStore && usesMpi) {
    co.storeOwner = StoreOwner::Rank0;
    BootstrappedStore bootstrapped = bootstrapStoreOverMpi(co);
    storeServer_ = std::move(bootstrapped.server);
    baseStore_ = std::move(bootstrapped.client);
    co.secret = bootstrapped.secret;
    return "-bootstrapped";
  }
  if (noStore || options.storePort <= 0) {
    throw InvalidArgument("a job of " + std::to_string(topology_.size) +
                          " ranks needs a rendezvous store: start it with horarun, or set "
                          "HORA_RENDEZVOUS_ADDR and HORA_RENDEZVOUS_PORT (or MASTER_ADDR and "
                          "MASTER_PORT)");
  }
  baseStore_ = storeCall(co, "connecting to it", [&] {
    return std::make_unique<TcpStoreClient>(options.storeHost, options.storePort, options.secret,
                                            co.startTimeout);
  });
  return std::to_string(options.generation);
}

namespace {

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

}  // namespace

void RuntimeImpl::addStaticProcessSets(const std::vector<std::vector<int>>& sets) {
  requireSameOnEveryRank(*world_, describeSets(sets), "the process sets given to init");
  std::vector<int> all(topology_.size);
  for (int i = 0; i < topology_.size; ++i) all[i] = i;
  collectives::RankPlace place{topology_.crossRank, topology_.crossSize, topology_.localSize};
  HierarchyRequest requested{settings_.hierarchicalAllreduce, settings_.hierarchicalAllgather};
  // When the world's data runs over TCP alone (not every rank on one host), the ranks of each
  // host of a hierarchical path try a shared segment of their own for their local steps.
  HostLocalFactory hostLocal = [this](int host, int index, const std::vector<int>& hostRanks,
                                      std::string* why) {
    if (transportName_ == "tcp+shm") return std::unique_ptr<Communicator>();  // already shm
    if (transportName_ != "tcp") {
      *why = "shared memory runs beside TCP only (the job's transport is " + transportName_ + ")";
      return std::unique_ptr<Communicator>();
    }
    if (hostRanks.size() == 1) return std::unique_ptr<Communicator>();  // nothing to share
    ConnectOptions o = connectOptions_;
    o.rank = index;
    o.size = static_cast<int>(hostRanks.size());
    PrefixStore hostStore(*store_, "host" + std::to_string(host) + "/");
    return makeTransport("shm")->hostCommunicator(o, hostStore, settings_.shmDisable, hostRanks,
                                                  why);
  };
  sets_.add(0, all, makeGlobalCommunicator(*world_, all, requested, place, hostLocal));
  int id = 1;
  for (auto ranks : sets) {
    std::sort(ranks.begin(), ranks.end());
    bool valid = !ranks.empty() && ranks.front() >= 0 && ranks.back() < topology_.size &&
                 std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end();
    if (!valid) throw InvalidArgument("a process set needs distinct ranks in [0, size)");
    if (sets_.findByRanks(ranks) >= 0) {
      throw InvalidArgument(
          "process set with these ranks is given twice (or equals the global set)");
    }
    bool member = std::binary_search(ranks.begin(), ranks.end(), topology_.rank);
    sets_.add(id++, ranks, member ? world_->subset(ranks) : nullptr);
  }
}

// A wake-up asked since the loop's last cycle start is still ahead of it, and that cycle reads
// everything published before this call (cycle() clears the flag first): no second one needed.
void RuntimeImpl::wakeLoop() {
  if (wakePending_.exchange(true, std::memory_order_acq_rel)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!running_ || !control_) return;
  control_->wakeup();
  loopWakeups_.fetch_add(1, std::memory_order_relaxed);
}

EngineCounters RuntimeImpl::counters() const {
  EngineCounters c;
  c.controlMessagesSent = controlSent_.load(std::memory_order_relaxed);
  c.loopWakeups = loopWakeups_.load(std::memory_order_relaxed);
  c.waitEndReports = waitEndReports_.load(std::memory_order_relaxed);
  return c;
}

Settings RuntimeImpl::settings() const {
  Settings s = settings_;
  std::lock_guard<std::mutex> lock(tunedMu_);
  s.fusionThreshold = tuned_.fusionThreshold;
  s.cycleTimeMs = tuned_.cycleTimeMs;
  return s;
}

bool RuntimeImpl::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

std::vector<std::shared_ptr<Handle>> RuntimeImpl::enqueue(std::vector<OpRequest> requests) {
  std::vector<TensorEntry> group;
  std::vector<std::shared_ptr<Handle>> handles;
  group.reserve(requests.size());
  handles.reserve(requests.size());
  auto now = Clock::now();
  for (auto& op : requests) {
    TensorEntry e;
    if (op.tensor.device.isCpu() || !isDataOp(op.request.kind)) {
      checkAndCompleteRequest(op, topology_.rank, sets_, dataCapabilities_);
    } else {
      const gpu::GpuLibrary& lib = gpu::gpuLibrary();
      // Only the global set (never removed, so its communicator lives as long as the runtime)
      // runs hierarchically.
      Communicator* global = op.request.processSetId == 0 ? sets_.communicator(0) : nullptr;
      gpu::checkGpuRequest(op, lib, gpuHierarchy(global) != nullptr);
      checkAndCompleteRequest(op, topology_.rank, sets_,
                              gpu::NcclCommunicator::gpuCapabilities(lib));
    }
    e.request = std::move(op.request);
    e.tensor = std::move(op.tensor);
    e.handle = handleSpin_ ? std::make_shared<Handle>(handleSpin_)
                           : std::make_shared<Handle>(Micros(settings_.spinMicroseconds));
    e.enqueuedAt = now;
    handles.push_back(e.handle);
    group.push_back(std::move(e));
  }
  queue_.push(std::move(group));
  wakeLoop();
  return handles;
}

std::shared_ptr<Handle> RuntimeImpl::enqueueControl(OpKind kind, const std::string& name,
                                                    ProcessSetChange change,
                                                    const std::string& callSite) {
  OpRequest op;
  op.request.kind = kind;
  op.request.name = name + "." + std::to_string(controlCounter_++);
  op.request.processSet = std::move(change);
  op.request.callSite = callSite;
  return enqueue({op}).front();
}

void RuntimeImpl::waitBegin() {
  if (waiters_.fetch_add(1, std::memory_order_acq_rel) == 0) wakeLoop();
}

// The loop needs to hear of a wait's end only while the coordinator may count this rank as
// blocked (waitWatched_). A wait that ended because its handle completed usually finds it clear:
// the batch that completed the handle made the last blocked report stale. Paired with the loop's
// store then load in cycle(): either it sees the count drop or this sees the flag.
void RuntimeImpl::waitEnd() {
  if (waiters_.fetch_sub(1, std::memory_order_seq_cst) != 1) return;
  if (waitWatched_.load(std::memory_order_seq_cst)) wakeLoop();
}

std::shared_ptr<Handle> RuntimeImpl::addProcessSet(const std::vector<int>& ranks,
                                                   const std::string& callSite) {
  if (!settings_.dynamicProcessSets) {
    throw InvalidArgument(
        "adding process sets after init needs dynamic process sets: set "
        "HORA_DYNAMIC_PROCESS_SETS=1 or call init(process_sets=\"dynamic\")");
  }
  std::vector<int32_t> sorted(ranks.begin(), ranks.end());
  std::sort(sorted.begin(), sorted.end());
  bool valid = !sorted.empty() && sorted.front() >= 0 && sorted.back() < topology_.size &&
               std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  if (!valid) throw InvalidArgument("a process set needs distinct ranks in [0, size)");
  ProcessSetChange change;
  change.ranks = std::move(sorted);
  return enqueueControl(OpKind::AddProcessSet, "process_set.add", std::move(change), callSite);
}

std::shared_ptr<Handle> RuntimeImpl::removeProcessSet(int id, const std::string& callSite) {
  if (!settings_.dynamicProcessSets) {
    throw InvalidArgument(
        "removing process sets needs dynamic process sets: set "
        "HORA_DYNAMIC_PROCESS_SETS=1 or call init(process_sets=\"dynamic\")");
  }
  ProcessSetChange change;
  change.id = id;
  return enqueueControl(OpKind::RemoveProcessSet, "process_set.remove", std::move(change),
                        callSite);
}

void RuntimeImpl::startTimeline(const std::string& path, bool markCycles) {
  if (topology_.rank != 0) return;
  LogRankScope logRank(topology_.rank);  // the timeline's writer thread inherits it
  TimelineOptions o;
  o.path = path;
  o.markCycles = markCycles;
  o.maxBytes = settings_.timelineMaxMb << 20;
  o.sampleEvery = static_cast<int>(settings_.timelineSampleEvery);
  timeline_.start(o);
}

void RuntimeImpl::shutdown() {
  shutdownRequested_ = true;
  wakeLoop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace hora
