#include "core/runtime.h"

#include <algorithm>

#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/common/spin.h"
#include "core/coordinator/enqueue_checks.h"
#include "core/runtime_impl.h"
#include "core/transport/device_backend.h"
#include "core/transport/hierarchical_communicator.h"

namespace hora {

std::unique_ptr<Runtime> Runtime::start(const RuntimeOptions& options) {
  return std::make_unique<RuntimeImpl>(options);
}

RuntimeImpl::RuntimeImpl(const RuntimeOptions& options)
    : topology_(options.topology),
      settings_(options.settings),
      tuned_(options.settings),
      sets_(options.topology.rank) {
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
  links_ = connectWorld(options, settings_);
  addStaticProcessSets(links_, topology_, settings_, options.processSets, sets_);
  // Only through local agreement (one host, cache on) does a collective need no control message.
  // Under auto, up to two ranks per CPU (callerDrivesByDefault says why). A rank bound to one CPU
  // qualifies: while its caller drives, the loop parks (background_loop.h), so the two threads do
  // not take turns on the CPU.
  bool callerDrives =
      settings_.callerDrives == Preference::On ||
      (settings_.callerDrives == Preference::Auto && callerDrivesByDefault(t.localSize));
  callerDrives = callerDrives && links_.agreement && settings_.cacheCapacity > 0;
  loop_ = std::make_unique<BackgroundLoop>(
      BackgroundLoop::Parts{topology_, settings_, links_, sets_, queue_, timeline_, waits_, waker_,
                            tuned_},
      static_cast<int>(options.processSets.size()));
  if (callerDrives) callerDriver_ = std::make_shared<CallerDriver>(loop_.get());
  if (t.rank == 0 && !settings_.timeline.empty() && settings_.timeline != "DYNAMIC") {
    startTimeline(settings_.timeline, settings_.timelineMarkCycles);
  }
  waker_.open(links_.control.get());
  thread_ = std::thread([this] {
    LogRankScope logRank(topology_.rank);
    loop_->run();
  });
}

RuntimeImpl::~RuntimeImpl() { shutdown(); }

EngineCounters RuntimeImpl::counters() const {
  EngineCounters c;
  c.controlMessagesSent = loop_->controlSent();
  c.loopWakeups = waker_.asked();
  c.waitEndReports = waits_.endReports();
  c.callerOps = loop_->callerOps();
  c.agreedRounds = loop_->agreedRounds();
  c.loopCycles = loop_->cycles();
  c.foldedOps = loop_->foldedOps();
  return c;
}

std::vector<std::shared_ptr<Handle>> RuntimeImpl::enqueue(std::vector<OpRequest> requests,
                                                          bool callerWaits) {
  std::vector<TensorEntry> group;
  std::vector<std::shared_ptr<Handle>> handles;
  bool driven = callerDriver_ != nullptr;
  group.reserve(requests.size());
  handles.reserve(requests.size());
  auto now = Clock::now();
  for (auto& op : requests) {
    TensorEntry e;
    if (op.tensor.device.isCpu() || !isDataOp(op.request.kind)) {
      checkAndCompleteRequest(op, topology_.rank, sets_, links_.dataCapabilities);
    } else {
      // Only the global set (never removed, so its communicator lives as long as the runtime)
      // runs hierarchically.
      Communicator* global = op.request.processSetId == 0 ? sets_.communicator(0) : nullptr;
      checkAndCompleteRequest(op, topology_.rank, sets_,
                              deviceBackendFor(op.tensor.device.kind).capabilities(),
                              gpuHierarchy(global) != nullptr);
    }
    e.request = std::move(op.request);
    e.tensor = std::move(op.tensor);
    // GPU work stays on the background thread (background_loop.h).
    std::shared_ptr<WaitDriver> driver;
    if (e.tensor.device.isCpu()) driver = callerDriver_;
    driven = driven && driver != nullptr;
    e.handle = handleSpin_ ? std::make_shared<Handle>(handleSpin_, std::move(driver))
                           : std::make_shared<Handle>(Micros(settings_.spinMicroseconds),
                                                      std::move(driver));
    e.enqueuedAt = now;
    handles.push_back(e.handle);
    group.push_back(std::move(e));
  }
  queue_.push(std::move(group));
  // Waking the loop for work its caller is about to drive would put a second thread on it.
  if (!(callerWaits && driven)) wakeLoop();
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

void RuntimeImpl::waitBegin(bool driven) {
  if (waits_.begin() && !driven) wakeLoop();
}

void RuntimeImpl::waitEnd() {
  if (waits_.end()) wakeLoop();
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
  if (loop_) loop_->requestShutdown();
  wakeLoop();
  if (thread_.joinable()) thread_.join();
  if (callerDriver_) callerDriver_->detach();
}

}  // namespace hora
