#include "core/runtime/background_loop.h"

#include <algorithm>
#include <iterator>
#include <thread>
#include <utility>

#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/common/spin.h"
#include "core/coordinator/codec.h"

namespace hora {
namespace {

// How often the loop looks at GPU work in flight.
constexpr Millis kGpuPollInterval{1};
// How long a parked loop sleeps before it looks at the control channel again: what may arrive
// while callers drive (a heartbeat, a rank's failure) waits at most this long. Not shorter: each
// wake-up of the loop on a CPU it shares with its caller costs that caller the CPU (measured at 2
// ranks bound to a CPU each: a slice of 1 ms made a blocking 4 B allreduce 10-20% slower on
// average than one of 10 ms).
constexpr Millis kParkSlice{10};
// How long after a caller stopped polling the loop still parks for it: the next blocking call is
// likely near.
constexpr Millis kCallerGap{1};

Millis earliest(Millis a, Millis b) {  // -1: no bound
  if (a.count() < 0) return b;
  if (b.count() < 0) return a;
  return std::min(a, b);
}

// HORA_AGREEMENT_PAYLOADS (spin.h's payloadsByDefault says why auto is what it is).
bool publishesPayloads(const BackgroundLoop::Parts& parts) {
  Preference p = parts.settings.agreementPayloads;
  return p == Preference::On ||
         (p == Preference::Auto && payloadsByDefault(parts.topology.localSize));
}

bool needsSending(const RequestBatch& batch) {
  return !batch.requests.empty() || !batch.cacheBits.empty();
}

// Holds the drive lock again when it goes out of scope, also when what it guards throws.
class Relock {
 public:
  explicit Relock(std::unique_lock<std::mutex>& held) : held_(held) { held_.unlock(); }
  ~Relock() { held_.lock(); }
  Relock(const Relock&) = delete;
  Relock& operator=(const Relock&) = delete;

 private:
  std::unique_lock<std::mutex>& held_;
};

}  // namespace

BackgroundLoop::BackgroundLoop(Parts parts, int staticSets)
    : p_(parts),
      participant_(static_cast<size_t>(parts.settings.cacheCapacity)),
      coordinator_(parts.topology.rank == 0 ? std::make_unique<Coordinator>(
                                                  parts.topology.size, parts.sets, parts.settings,
                                                  staticSets + 1, &parts.timeline)
                                            : nullptr),
      stalls_(parts.topology.rank == 0 ? std::make_unique<StallWatch>(parts.settings) : nullptr),
      sender_(*parts.links.control,
              [this](const ResponseBatch& b) {
                applyBatch(b);
                return shutdown_.stopped();
              }),
      peers_(parts.topology.rank, parts.topology.size,
             secondsToMillis(parts.settings.timeoutSeconds),
             [control = parts.links.control.get()](int peer) { return control->relays(peer); }),
      agreement_(std::move(parts.links.agreement), parts.links.agreedFusionThreshold,
                 parts.topology.size, publishesPayloads(parts), participant_, coordinator_.get(),
                 parts.timeline),
      applier_({parts.topology, parts.settings, parts.links, parts.sets, parts.queue, participant_,
                agreement_, parts.timeline}),
      cycleTimeMs_(parts.settings.cycleTimeMs),
      oneCpu_(boundToOneCpu()) {}

void BackgroundLoop::run() {
  driving_ = std::unique_lock<std::mutex>(drive_);
  requestPreciseSleeps();
  HORA_LOG(Debug, "background loop started (" << p_.links.transportName << ", " << p_.topology.size
                                              << " ranks)");
  std::string reason;
  bool failure = false;
  try {
    while (!shutdown_.stopped()) cycle();
    reason = shutdown_.cleanStopMessage();
  } catch (const std::exception& e) {
    reason = e.what();
    failure = true;
    HORA_LOG(Error, "background loop failed: " << reason);
  }
  ended_ = true;
  stop(reason, failure);
  driving_.unlock();
}

void BackgroundLoop::cycle() {
  // A caller cycle's failure stops the loop as one of the loop's own would.
  if (callerError_) std::rethrow_exception(std::exchange(callerError_, nullptr));
  cycles_.fetch_add(1, std::memory_order_relaxed);
  p_.timeline.cycleStart();
  // Before reading what frontend threads published: a wake() that still finds a wake-up pending
  // skips it and relies on what this cycle reads.
  p_.waker.cycleStart();
  // Before taking new entries: whatever a waiting thread enqueued before it began to wait is then
  // taken too, and the wait state never reaches the coordinator ahead of those requests.
  p_.waits.cycleStart();
  takeFresh();
  auto now = Clock::now();
  if (startShutdown(now)) return;
  sendDeferred(now);
  if (shutdown_.stopped()) return;

  Millis wait(-1);
  Clock::duration cycleTime = currentCycleTime();
  if (hasFresh()) {
    if (collectDue(now, cycleTime)) {
      RequestBatch batch = collectFresh(now);
      if (needsSending(batch)) send(batch, now);
      if (shutdown_.stopped()) return;
    } else {
      wait = std::chrono::ceil<Millis>(lastSend_ + cycleTime - now);
    }
  }
  if (shutdown_.expired(now, &wait)) return;
  reportWaiting();
  if (shutdown_.stopped() || coordinate(now)) return;
  if (agree(now, std::chrono::ceil<Millis>(cycleTime), &wait)) return;
  checkPeers(now);
  if (shutdown_.stopped()) return;
  listen(now, wait);
}

bool BackgroundLoop::tryDrive() {
  std::unique_lock<std::mutex> lock(drive_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // the lock holder's cycle takes what was enqueued
  if (!callerMayDrive()) {
    // A caller that enqueued without waking the loop (Runtime::enqueue) needs it now.
    p_.waker.wake();
    return false;
  }
  try {
    callerCycle();
  } catch (...) {
    callerError_ = std::current_exception();
  }
  LocalAgreement& agreement = agreement_.agreement();
  workLeft_.store(agreement.open() || agreement.held() > 0 || hasFresh(),
                  std::memory_order_release);
  // Requests to send and failures need the background thread now. (Slots held and rounds open
  // need it only once no caller steps them: callerDeparted().)
  if (!deferred_.empty() || callerError_) p_.waker.wake();
  return true;
}

void BackgroundLoop::callerDeparted(bool finished) {
  lastDeparture_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  int present = callersPresent_.fetch_sub(1, std::memory_order_acq_rel) - 1;
  // A caller about to sleep: the loop's poll may wait for what its cycles left (a slot held, a
  // round open) for longer than their timers allow, and a parked loop for its park slice. The
  // last caller to go wakes the loop only when it left such work.
  if (!finished || (present == 0 && workLeft_.load(std::memory_order_acquire))) p_.waker.wake();
}

// GPU work is polled and finished by the background thread only; a shutdown is its to carry out.
bool BackgroundLoop::callerMayDrive() const {
  return !ended_ && !callerError_ && agreement_.enabled() && !applier_.usesGpu() &&
         !shutdown_.requested() && !shutdown_.stopped();
}

// The part of cycle() that needs no control channel.
void BackgroundLoop::callerCycle() {
  takeFresh();
  auto now = Clock::now();
  Clock::duration cycleTime = currentCycleTime();
  if (hasFresh() && collectDue(now, cycleTime)) {
    RequestBatch batch = collectFresh(now);
    if (needsSending(batch)) deferred_.push_back(std::move(batch));
  }
  // Requests go out before the next round (as in cycle()); and rank 0 builds what its
  // coordinator can before it joins another round (local_agreement.h), which only the
  // background thread does.
  if (!deferred_.empty() || (coordinator_ && !coordinator_->pending().empty())) return;
  LocalAgreement& agreement = agreement_.agreement();
  LocalAgreement::Outcome outcome =
      agreement.step(participant_.appliedBatches(), now, std::chrono::ceil<Millis>(cycleTime));
  if (!outcome.handOver.empty()) deferred_.push_back(agreement_.handOverBatch(outcome.handOver));
  callerOps_.fetch_add(runAgreed(outcome), std::memory_order_relaxed);
  agreement.failIfStalled(now);
}

Clock::duration BackgroundLoop::currentCycleTime() const {
  return std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(cycleTimeMs_));
}

void BackgroundLoop::takeFresh() {
  // taken_, fresh_ and the queue's own vector pass their buffers round: no allocation per cycle.
  p_.queue.takeNew(taken_);
  if (taken_.empty()) return;
  if (fresh_.empty()) {
    fresh_.swap(taken_);
  } else {
    fresh_.insert(fresh_.end(), std::make_move_iterator(taken_.begin()),
                  std::make_move_iterator(taken_.end()));
  }
}

// Returns true when the loop stopped.
bool BackgroundLoop::startShutdown(Clock::time_point now) {
  if (!shutdown_.start(now)) return false;
  if (coordinator_) {
    coordinator_->requestShutdown("rank 0 shut down");
    return false;
  }
  RequestBatch b;
  b.appliedBatches = participant_.appliedBatches();
  b.shutdown = true;
  sender_.toCoordinator(b);
  return shutdown_.stopped();
}

// Rank 0: builds and applies the next batch. Returns true when the cycle ends here (more may be
// ready: look again before blocking).
bool BackgroundLoop::coordinate(Clock::time_point now) {
  if (!coordinator_) return false;
  // While its agreement round is open, rank 0 builds no batch (local_agreement.h). It closes the
  // round it can and builds before it joins another, so that rounds back to back never hold up
  // what only the coordinator can answer.
  if (agreement_.enabled() && agreement_.agreement().resolvable()) {
    takeAgreed(agreement_.agreement().resolve());
    if (shutdown_.stopped()) return true;
  }
  if (agreement_.enabled() && agreement_.agreement().open()) return false;
  stalls_->checkDeadlocks(*coordinator_, now);
  ResponseBatch batch;
  if (!coordinator_->buildBatch(&batch)) return false;
  sender_.toWorkers(encodeResponseBatch(batch));
  applyBatch(batch);
  return true;
}

// One step of local agreement; bounds `wait` by when the next is due. Returns true when the cycle
// ends here.
bool BackgroundLoop::agree(Clock::time_point now, Millis cycle, Millis* wait) {
  if (!agreement_.enabled()) return false;
  LocalAgreement& agreement = agreement_.agreement();
  LocalAgreement::Outcome outcome = agreement.step(participant_.appliedBatches(), now, cycle);
  takeAgreed(outcome);
  // Rank 0's own hand-overs may be ready at the coordinator: look again before blocking.
  if (!outcome.handOver.empty() && coordinator_) return true;
  if (shutdown_.stopped()) return true;
  agreement.failIfStalled(now);
  *wait = earliest(*wait, agreement.untilDue(now, cycle));
  return false;
}

void BackgroundLoop::listen(Clock::time_point now, Millis wait) {
  applier_.progressGpu(now);
  std::vector<ControlChannel::Message> messages;
  // The loop's own checks (peers, stalls), read before the drive lock is let go: a driving caller
  // writes the peers' timers (PeerWatch::paused).
  const Millis checks = untilChecks(now);
  Millis timeout = earliest(wait, checks);
  Micros spin(p_.settings.spinMicroseconds);
  const bool park = mayPark(now);
  // A park's bound: the cycle's own timers (`wait`: collect a burst, local agreement's) are not
  // the parked loop's, since callers run that part of the cycle (callerCycle()) while they drive.
  // Only the loop's checks bound the sleep, and the slice.
  const Millis parkFor = earliest(checks, kParkSlice);
  {
    // Callers may drive while this thread waits for messages (background_loop.h); the poll
    // touches nothing of the loop's but the control channel.
    Relock relock(driving_);
    if (park) {
      p_.waker.park(parkFor);
      timeout = Millis(0);
      spin = Micros(0);
    }
    p_.links.control->poll(messages, timeout, spin);
    // Woken without a message on a CPU shared with the callers: most likely by a submission,
    // whose caller would otherwise give up the CPU to this thread at once, and again for each
    // tensor of a burst (a backward pass). Letting it go on first, the loop takes the burst
    // in one cycle: the 200-tensor step 10-20% faster at 2 ranks bound to a CPU each.
    if (oneCpu_ && messages.empty()) std::this_thread::yield();
  }
  auto arrived = Clock::now();
  if (coordinator_) stalls_->inspectStalls(*coordinator_, p_.sets, arrived);
  for (const auto& m : messages) {
    peers_.heard(m.from, arrived);
    if (coordinator_) {
      RequestBatch b = decodeRequestBatch(m.bytes);
      if (sender_.answerHeartbeat(m.from, b.heartbeat, 0)) continue;
      coordinator_->ingest(m.from, std::move(b));
    } else {
      ResponseBatch b = decodeResponseBatch(m.bytes);
      bool heartbeat = sender_.answerHeartbeat(m.from, b.heartbeat, participant_.appliedBatches());
      if (shutdown_.stopped()) return;
      if (heartbeat) continue;
      applyBatch(b);
      if (shutdown_.stopped()) return;
    }
  }
}

// While callers drive, they step local agreement and run the rounds themselves: the loop parks
// instead of waiting on the control channel, whose wake-ups (another rank's round published)
// would only bring a second thread to work a caller does. It parks while a caller polls, and
// for kCallerGap after one left when the loop has no round or hits of its own (the next blocking
// call is likely near; anything enqueued without a waiting caller wakes the loop). Only while
// no control message is needed soon: nothing to send or awaited from the coordinator, and rank
// 0's coordinator has nothing pending.
bool BackgroundLoop::mayPark(Clock::time_point now) const {
  if (!agreement_.enabled() || !deferred_.empty() || agreement_.awaitingCoordinator() > 0 ||
      applier_.gpuBusy() || (coordinator_ && !coordinator_->pending().empty()) ||
      shutdown_.requested()) {
    return false;
  }
  if (callersPresent_.load(std::memory_order_acquire) > 0) return true;
  Clock::time_point departed{Clock::duration(lastDeparture_.load(std::memory_order_relaxed))};
  const LocalAgreement& agreement = agreement_.agreement();
  return now - departed < kCallerGap && !agreement.open() && agreement.held() == 0 && !hasFresh();
}

// Send at once when nothing sent is still unanswered (lowest latency for one op at a time) or
// the last send is at least one cycle old; otherwise wait out the cycle, so that a burst of
// enqueues (a backward pass) travels as one batch and fuses.
bool BackgroundLoop::collectDue(Clock::time_point now, Clock::duration cycleTime) const {
  return agreement_.awaitingCoordinator() == 0 || now - lastSend_ >= cycleTime;
}

// The fresh tensors (and resends) as one batch; cache hits stay held for local agreement. What
// is left in the batch goes to the coordinator.
RequestBatch BackgroundLoop::collectFresh(Clock::time_point now) {
  RequestBatch batch = participant_.collect(p_.queue, std::move(fresh_));  // empties fresh_
  agreement_.hold(batch, now, p_.queue);
  return batch;
}

// What caller cycles collected or handed over, in their order.
void BackgroundLoop::sendDeferred(Clock::time_point now) {
  std::vector<RequestBatch> batches = std::move(deferred_);
  deferred_.clear();  // moved from
  for (RequestBatch& batch : batches) {
    send(batch, now);
    if (shutdown_.stopped()) return;
  }
}

// Requests (or handed-over cache bits) to the coordinator, with this rank's wait state.
void BackgroundLoop::send(RequestBatch& batch, Clock::time_point now) {
  lastSend_ = now;
  batch.waiting = p_.waits.requestsSent(batch.appliedBatches);
  if (coordinator_) {
    coordinator_->ingest(p_.topology.rank, batch);
  } else {
    sender_.toCoordinator(batch);
  }
}

// The coordinator needs this rank's wait state whenever it changes, and again after every batch
// applied while waiting (a report made before a batch may be stale: the batch may release it).
void BackgroundLoop::reportWaiting() {
  if (!fresh_.empty() || participant_.hasResends()) return;  // travels with those requests
  bool awaiting = agreement_.awaitingCoordinator() > 0;
  uint64_t applied = participant_.appliedBatches();
  if (coordinator_) {
    coordinator_->setWaiting(p_.topology.rank, p_.waits.rankZeroReport(awaiting), applied);
    return;
  }
  int report = p_.waits.workerReport(awaiting, applied);
  if (report < 0) return;
  RequestBatch b;
  b.appliedBatches = applied;
  b.waiting = report == 1;
  sender_.toCoordinator(b);
}

void BackgroundLoop::applyBatch(const ResponseBatch& batch) {
  // The agreement round this rank published runs first when every rank published it; otherwise
  // it can run nothing (local_agreement.h).
  if (agreement_.enabled() && agreement_.agreement().resolvable()) {
    takeAgreed(agreement_.agreement().resolve());
    if (shutdown_.stopped()) return;
  }
  auto begin = Clock::now();
  // Hits that arrived as slots alone name what the cache held before this batch's evictions.
  std::vector<Response> hits = participant_.rebuildHits(
      batch.responses, [this](int32_t set) { return p_.sets.setRank(set) >= 0; });
  agreement_.evicted(batch.evictedSlots);
  participant_.applyEvictions(batch.evictedSlots);
  size_t hit = 0;
  for (const auto& r : batch.responses) applier_.apply(r.slotsOnly() ? hits[hit++] : r);
  // No control message was read while the collectives ran: that time is nobody's silence.
  if (!batch.responses.empty()) {
    auto spent = Clock::now() - begin;
    peers_.paused(spent);
    agreement_.paused(spent);
  }
  participant_.batchApplied();
  if (batch.cycleTimeMs >= 0 || batch.fusionThreshold >= 0) {
    if (batch.cycleTimeMs >= 0) cycleTimeMs_ = batch.cycleTimeMs;
    p_.tuned.publish(cycleTimeMs_, batch.fusionThreshold);
  }
  if (batch.shutdown) shutdown_.stop(batch.shutdownReason);
}

void BackgroundLoop::takeAgreed(const LocalAgreement::Outcome& outcome) {
  if (!outcome.handOver.empty()) {
    RequestBatch batch = agreement_.handOverBatch(outcome.handOver);
    send(batch, Clock::now());
  }
  if (shutdown_.stopped()) return;
  runAgreed(outcome);
}

// Every round the outcome agreed on, in order; returns how many collectives ran.
size_t BackgroundLoop::runAgreed(const LocalAgreement::Outcome& outcome) {
  size_t ran = 0;
  for (size_t i = 0; i < outcome.ready.size(); ++i) {
    ran += runRound(outcome.ready[i], outcome.payloads[i]);
  }
  return ran;
}

// Returns how many collectives ran. payloads: the round's eager payloads (local_agreement.h),
// which the lone response of a lone slot folds.
size_t BackgroundLoop::runRound(const std::vector<int>& slots,
                                const std::vector<const uint8_t*>& payloads) {
  if (slots.empty()) return 0;
  const std::vector<Response>& plan = agreement_.plan(slots);
  auto begin = Clock::now();
  const bool folds = !payloads.empty() && plan.size() == 1;
  // Counted before the run completes the handle: a caller it wakes then reads the new counts.
  agreedRounds_.fetch_add(1, std::memory_order_relaxed);
  if (folds) foldedOps_.fetch_add(1, std::memory_order_relaxed);
  for (const Response& r : plan) {
    if (isDataOp(r.kind)) {
      applier_.runData(r, folds ? &payloads : nullptr);
    } else {
      applier_.apply(r);  // a cached barrier
    }
  }
  // No control message was read while the collectives ran: that time is nobody's silence.
  auto spent = Clock::now() - begin;
  peers_.paused(spent);
  agreement_.paused(spent);
  return plan.size();
}

void BackgroundLoop::checkPeers(Clock::time_point now) {
  for (int r : peers_.check(now, [this] { return watchedPeers(); })) {
    sender_.heartbeat(r, Heartbeat::Ping, participant_.appliedBatches());
  }
}

// A worker waits for rank 0 while it has requests unanswered; rank 0 waits for the ranks a
// pending tensor misses.
std::vector<int> BackgroundLoop::watchedPeers() {
  std::vector<int> watched;
  if (coordinator_) {
    for (int r : coordinator_->awaitedRanks()) {
      if (r != p_.topology.rank) watched.push_back(r);
    }
  } else if (agreement_.awaitingCoordinator() > 0) {
    watched.push_back(0);
  }
  return watched;
}

// How long until the loop must look by itself: the next peer check, on rank 0 the next stall or
// deadlock check, and GPU work in flight. No poll or park outlasts it.
Millis BackgroundLoop::untilChecks(Clock::time_point now) {
  // GPU work in flight is polled for completion every millisecond (a blocking wait, not a spin).
  Millis until = applier_.gpuBusy() ? kGpuPollInterval : Millis(-1);
  until = earliest(until, peers_.untilNextCheck(now));
  if (!stalls_) return until;
  return earliest(until, stalls_->untilNextCheck(*coordinator_, now));
}

void BackgroundLoop::stop(const std::string& reason, bool failure) {
  // Tell the other ranks first, so they fail their pending work now rather than at a timeout.
  if (coordinator_ && failure && p_.links.control) {
    ResponseBatch b;
    b.shutdown = true;
    b.shutdownReason = reason;
    sender_.toWorkers(encodeResponseBatch(b), /*bestEffort=*/true);
  }
  std::string message = failure ? "Hora stopped after a failure: " + reason : reason;
  auto error = std::make_exception_ptr(ShutdownError(message));
  applier_.stopGpu(error, failure);
  auto pending = p_.queue.closeAndDrain(message);
  for (auto& e : pending) e->handle->complete(error);
  // Closing connections now lets peers blocked on this rank fail at once.
  p_.waker.close([this] {
    p_.sets.releaseCommunicators();
    p_.links.world.reset();
    p_.links.control.reset();
  });
}

}  // namespace hora
