// The background thread: batch newly enqueued tensors, negotiate them with the coordinator,
// execute response batches in sequence order, and tear everything down on shutdown or failure.
#include <algorithm>
#include <iterator>

#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/common/spin.h"
#include "core/fusion/fusion_planner.h"
#include "core/ops/executor.h"
#include "core/runtime_impl.h"
#include "core/transport/hierarchical_communicator.h"

namespace hora {
namespace {

// How long a rank that asked to shut down waits for the coordinator to acknowledge.
constexpr Millis kShutdownAckTimeout{10000};
// How often the loop looks at GPU work in flight.
constexpr Millis kGpuPollInterval{1};
// How often rank 0 looks for deadlocks while tensors are pending.
constexpr Millis kDeadlockCheckInterval{200};
// While a rank already watches peers, how often it looks again for the peers it waits for (pings
// go out at most every 20 ms anyway). With none watched it looks every cycle, so that a wait
// that begins is watched from its first cycle.
constexpr Millis kLivenessCheckInterval{20};

const char* kShutdownText =
    "Hora has been shut down. This was caused by an exception on one of the ranks or an attempt "
    "to run a collective after one of the ranks finished execution";

}  // namespace

void RuntimeImpl::loop() {
  requestPreciseSleeps();
  HORA_LOG(Debug,
           "background loop started (" << transportName_ << ", " << topology_.size << " ranks)");
  std::string reason;
  bool failure = false;
  try {
    while (!stopped_) cycle();
    reason = kShutdownText;
    if (!stopReason_.empty()) reason += " (" + stopReason_ + ")";
  } catch (const std::exception& e) {
    reason = e.what();
    failure = true;
    HORA_LOG(Error, "background loop failed: " << reason);
  }
  stop(reason, failure);
}

void RuntimeImpl::cycle() {
  timeline_.cycleStart();
  // Before reading what frontend threads published: a wakeLoop() that still finds the flag set
  // skips its wake-up and relies on what this cycle reads.
  wakePending_.exchange(false, std::memory_order_acq_rel);
  // Read before taking new entries: whatever a waiting thread enqueued before it began to wait is
  // then taken too, and the wait state never reaches the coordinator ahead of those requests.
  // The flag first (see waitEnd()); reportWaiting() clears it when no blocked report is current.
  waitWatched_.store(true, std::memory_order_seq_cst);
  waitingNow_ = waiters_.load(std::memory_order_seq_cst) > 0;
  auto fresh = queue_.takeNew();
  if (fresh_.empty()) {
    fresh_ = std::move(fresh);
  } else {
    fresh_.insert(fresh_.end(), std::make_move_iterator(fresh.begin()),
                  std::make_move_iterator(fresh.end()));
  }
  auto now = Clock::now();

  if (shutdownRequested_ && !shutdownSent_) {
    shutdownSent_ = true;
    shutdownDeadline_ = now + kShutdownAckTimeout;
    if (coordinator_) {
      coordinator_->requestShutdown("rank 0 shut down");
    } else {
      RequestBatch b;
      b.appliedBatches = participant_.appliedBatches();
      b.shutdown = true;
      sendToCoordinator(b);
      if (stopped_) return;
    }
  }

  // Send at once when nothing sent is still unanswered (lowest latency for one op at a time) or
  // the last send is at least one cycle old; otherwise wait out the cycle, so that a burst of
  // enqueues (a backward pass) travels as one batch and fuses.
  Millis wait(-1);
  bool haveWork = !fresh_.empty() || participant_.hasResends();
  auto cycleTime = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(cycleTimeMs_));
  if (haveWork) {
    if (awaitingCoordinator() == 0 || now - lastSend_ >= cycleTime) {
      sendRequests(now);
      if (stopped_) return;
    } else {
      wait = std::chrono::ceil<Millis>(lastSend_ + cycleTime - now);
    }
  }
  if (shutdownSent_) {
    if (now >= shutdownDeadline_) {
      HORA_LOG(Warning, "the coordinator did not acknowledge shutdown; leaving anyway");
      stopped_ = true;
      return;
    }
    auto left = std::chrono::ceil<Millis>(shutdownDeadline_ - now);
    wait = wait.count() < 0 ? left : std::min(wait, left);
  }

  reportWaiting();
  if (stopped_) return;

  // While its agreement round is open, rank 0 builds no batch (local_agreement.h). It closes the
  // round it can and builds before it joins another, so that rounds back to back never hold up
  // what only the coordinator can answer.
  if (coordinator_ && agreement_ && agreement_->resolvable()) {
    takeAgreed(agreement_->resolve());
    if (stopped_) return;
  }
  if (coordinator_ && !(agreement_ && agreement_->open())) {
    if (now >= deadlockCheckAt_) {
      coordinator_->failDeadlocks(now);
      deadlockCheckAt_ = now + kDeadlockCheckInterval;
    }
    ResponseBatch batch;
    if (coordinator_->buildBatch(&batch)) {
      std::string bytes = encodeResponseBatch(batch);
      for (int r = 1; r < topology_.size; ++r) sendControl(r, bytes);
      applyBatch(batch);
      return;  // more may be ready: look again before blocking
    }
  }
  if (agreement_) {
    const Millis cycle = std::chrono::ceil<Millis>(cycleTime);
    // Rank 0's own hand-overs may be ready at the coordinator: look again before blocking.
    if (agreeLocally(now, cycle) && coordinator_) return;
    if (stopped_) return;
    agreement_->failIfStalled(now);
    Millis due = agreement_->untilDue(now, cycle);
    if (due.count() >= 0) wait = wait.count() < 0 ? due : std::min(wait, due);
  }

  checkLiveness(now);
  if (stopped_) return;
  if (gpu_) gpu_->progress(now);
  std::vector<ControlChannel::Message> messages;
  control_->poll(messages, pollTimeout(wait, now), Micros(settings_.spinMicroseconds));
  auto arrived = Clock::now();
  if (coordinator_) inspectStalls(arrived);
  for (const auto& m : messages) {
    liveness_.heard(m.from, arrived);
    if (coordinator_) {
      RequestBatch b = decodeRequestBatch(m.bytes);
      if (answeredHeartbeat(m.from, b.heartbeat)) continue;
      coordinator_->ingest(m.from, b);
    } else {
      ResponseBatch b = decodeResponseBatch(m.bytes);
      bool heartbeat = answeredHeartbeat(m.from, b.heartbeat);
      if (stopped_) return;
      if (heartbeat) continue;
      applyBatch(b);
      if (stopped_) return;
    }
  }
}

// A worker waits for rank 0 while it has requests unanswered; rank 0 waits for the ranks a
// pending tensor misses. A stopped peer keeps its connection open (its kernel even answers
// keepalive), so silence is the only sign: past HORA_TIMEOUT_SECONDS the job fails, naming it.
void RuntimeImpl::checkLiveness(Clock::time_point now) {
  if (now < livenessCheckAt_ && liveness_.untilNextCheck(now).count() >= 0) return;
  livenessCheckAt_ = now + kLivenessCheckInterval;
  std::vector<int> watched;
  if (coordinator_) {
    for (int r : coordinator_->awaitedRanks()) {
      if (r != topology_.rank) watched.push_back(r);
    }
  } else if (awaitingCoordinator() > 0) {
    watched.push_back(0);
  }
  Liveness::Verdict v = liveness_.check(watched, now);
  if (v.silent >= 0) {
    std::string who =
        coordinator_ ? "rank " + std::to_string(v.silent) : "rank 0 (the coordinator)";
    std::string whom = coordinator_ ? "other ranks wait" : "this rank waits";
    throw TimeoutError("rank " + std::to_string(topology_.rank) + ": " + who +
                       " is unresponsive: it sent nothing on its control connection for " +
                       std::to_string(v.silentFor.count()) + " ms while " + whom +
                       " for it (stopped, hung or unreachable; HORA_TIMEOUT_SECONDS bounds this)");
  }
  for (int r : v.ping) sendHeartbeat(r, Heartbeat::Ping);
}

// A heartbeat batch carries nothing else: hearing it was the point, and a Ping wants a Pong.
bool RuntimeImpl::answeredHeartbeat(int from, Heartbeat kind) {
  if (kind == Heartbeat::None) return false;
  if (kind == Heartbeat::Ping) sendHeartbeat(from, Heartbeat::Pong);
  return true;
}

void RuntimeImpl::sendHeartbeat(int peer, Heartbeat kind) {
  if (coordinator_) {
    ResponseBatch b;
    b.heartbeat = kind;
    sendControl(peer, encodeResponseBatch(b));
  } else {
    RequestBatch b;
    b.appliedBatches = participant_.appliedBatches();
    b.heartbeat = kind;
    sendToCoordinator(b);
  }
}

// A worker's batch to rank 0. Rank 0 closes its end as soon as it has told every rank to stop, so
// a send can fail while that news waits unread here: apply what already arrived, and fail only
// when it did not stop this rank (a shutdown is no failure).
void RuntimeImpl::sendToCoordinator(const RequestBatch& b) {
  try {
    sendControl(0, encodeRequestBatch(b));
  } catch (const IoError&) {
    std::vector<ControlChannel::Message> arrived;
    control_->poll(arrived, Millis(0));  // throws when nothing more came
    for (const auto& m : arrived) {
      ResponseBatch batch = decodeResponseBatch(m.bytes);
      if (batch.heartbeat == Heartbeat::None) applyBatch(batch);
      if (stopped_) return;
    }
    throw;
  }
}

void RuntimeImpl::sendControl(int to, const std::string& bytes) {
  control_->send(to, bytes);
  controlSent_.fetch_add(1, std::memory_order_relaxed);
}

// The poll may not outlast the next liveness check, nor on rank 0 the next stall or deadlock check.
Millis RuntimeImpl::pollTimeout(Millis forSending, Clock::time_point now) {
  // GPU work in flight is polled for completion every millisecond (a blocking wait, not a spin).
  if (gpu_ && gpu_->busy()) {
    forSending = forSending.count() < 0 ? kGpuPollInterval : std::min(forSending, kGpuPollInterval);
  }
  auto until = [now](Clock::time_point t) { return millisUntil(t, now); };
  Millis alive = liveness_.untilNextCheck(now);
  if (alive.count() >= 0) {
    alive = std::max(alive, until(livenessCheckAt_));
    forSending = forSending.count() < 0 ? alive : std::min(forSending, alive);
  }
  if (!stalls_) return forSending;
  Millis check = stalls_->untilNextCheck(*coordinator_, now);
  if (coordinator_->watchingDeadlocks()) {
    Millis deadlocks = until(deadlockCheckAt_);
    check = check.count() < 0 ? deadlocks : std::min(check, deadlocks);
  }
  if (check.count() < 0) return forSending;
  return forSending.count() < 0 ? check : std::min(forSending, check);
}

void RuntimeImpl::inspectStalls(Clock::time_point now) {
  if (stalls_->untilNextCheck(*coordinator_, now).count() != 0) return;
  auto verdict = stalls_->check(*coordinator_, sets_, now);
  if (verdict.shutdown) coordinator_->requestShutdown(verdict.report);
}

// The coordinator needs this rank's wait state whenever it changes, and again after every batch
// applied while waiting (a report made before a batch may be stale: the batch may release it).
void RuntimeImpl::reportWaiting() {
  if (!fresh_.empty() || participant_.hasResends()) return;  // travels with those requests
  // Blocked only matters while something this rank sent is unanswered: otherwise the coordinator
  // holds nothing of it, and a rank it does not know to be blocked counts as free.
  bool blocked = waitingNow_ && awaitingCoordinator() > 0;
  uint64_t applied = participant_.appliedBatches();
  if (coordinator_) {
    coordinator_->setWaiting(topology_.rank, blocked, applied);
    waitWatched_.store(blocked, std::memory_order_seq_cst);
    return;
  }
  // The coordinator counts a blocked report only while no batch was built after it, and the
  // batches only grow: once this rank applied a later one, the report counts as "not blocked"
  // for good, and saying so again would change nothing there (the usual end of a blocking call:
  // the batch that completed it made it stale).
  if (reportedWaiting_ && applied != reportedApplied_) reportedWaiting_ = false;
  if (blocked != reportedWaiting_ || (blocked && applied != reportedApplied_)) {
    RequestBatch b;
    b.appliedBatches = applied;
    b.waiting = blocked;
    sendToCoordinator(b);
    if (!blocked) waitEndReports_.fetch_add(1, std::memory_order_relaxed);
    reportedWaiting_ = blocked;
    reportedApplied_ = applied;
  }
  waitWatched_.store(reportedWaiting_, std::memory_order_seq_cst);
}

void RuntimeImpl::sendRequests(Clock::time_point now) {
  RequestBatch batch = participant_.collect(queue_, std::move(fresh_));
  fresh_.clear();  // moved from
  if (agreement_) holdAgreeable(batch, now);
  if (batch.requests.empty() && batch.cacheBits.empty()) return;
  lastSend_ = now;
  batch.waiting = waitingNow_;
  reportedWaiting_ = waitingNow_;
  reportedApplied_ = batch.appliedBatches;
  if (coordinator_) {
    coordinator_->ingest(topology_.rank, batch);
  } else {
    sendToCoordinator(batch);
  }
}

void RuntimeImpl::applyBatch(const ResponseBatch& batch) {
  // The agreement round this rank published runs first when every rank published it; otherwise
  // it can run nothing (local_agreement.h).
  if (agreement_ && agreement_->resolvable()) {
    takeAgreed(agreement_->resolve());
    if (stopped_) return;
  }
  auto begin = Clock::now();
  if (agreement_) {
    for (int32_t slot : batch.evictedSlots) {
      // The coordinator opens the span again when the tensor reaches it in full.
      if (agreement_->evicted(slot) && coordinator_ && timeline_.enabled()) {
        timeline_.negotiateEnd(0, participant_.cachedResponse(slot).names.front());
      }
    }
  }
  participant_.applyEvictions(batch.evictedSlots);
  for (const auto& r : batch.responses) applyResponse(r);
  // No control message was read while the collectives ran: that time is nobody's silence.
  if (!batch.responses.empty()) {
    auto spent = Clock::now() - begin;
    liveness_.paused(spent);
    if (agreement_) agreement_->paused(spent);
  }
  participant_.batchApplied();
  if (batch.cycleTimeMs >= 0 || batch.fusionThreshold >= 0) {
    if (batch.cycleTimeMs >= 0) cycleTimeMs_ = batch.cycleTimeMs;
    std::lock_guard<std::mutex> lock(tunedMu_);
    tuned_.cycleTimeMs = cycleTimeMs_;
    if (batch.fusionThreshold >= 0) tuned_.fusionThreshold = batch.fusionThreshold;
  }
  if (batch.shutdown) {
    stopReason_ = batch.shutdownReason;
    stopped_ = true;
  }
}

void RuntimeImpl::completeNamed(const Response& r, std::exception_ptr error) {
  for (const auto& name : r.names) {
    auto entry = queue_.remove(tensorKey(r.processSetId, name));
    if (!entry) continue;
    finishedKey(tensorKey(r.processSetId, name));
    entry->handle->complete(error);
  }
}

void RuntimeImpl::applyResponse(const Response& r) {
  if (isDataOp(r.kind)) {
    runData(r);
  } else {
    applyControl(r);
  }
}

// Responses without tensors: the runtime handles them itself, no op function involved.
void RuntimeImpl::applyControl(const Response& r) {
  switch (r.kind) {
    case OpKind::Error:
      completeNamed(r, r.errorCode == ResponseError::InvalidArgument
                           ? std::make_exception_ptr(InvalidCollectiveError(r.errorMessage))
                           : std::make_exception_ptr(MismatchError(r.errorMessage)));
      return;
    case OpKind::Join: {
      if (agreement_) agreement_->setJoined(false);
      // Join requests live in the world set: the coordinator only answers once every rank joined.
      if (TensorEntry* e = queue_.find(tensorKey(0, r.names.front()))) {
        e->handle->lastJoinedRank = r.lastJoinedRank;
      }
      completeNamed(r, nullptr);
      return;
    }
    case OpKind::Barrier: runBarrier(r); return;
    case OpKind::AddProcessSet:
    case OpKind::RemoveProcessSet:
      applyProcessSetChange(r, queue_.find(tensorKey(0, r.names.front())));
      completeNamed(r, nullptr);
      return;
    default:
      throwInternal(__FILE__, __LINE__, std::string("no control path for ") + opKindName(r.kind));
  }
}

void RuntimeImpl::runBarrier(const Response& r) {
  if (sets_.setRank(r.processSetId) < 0) return;  // not a member: nothing to wait for
  try {
    sets_.communicator(r.processSetId)->barrier();
  } catch (...) {
    completeNamed(r, std::current_exception());
    throw;
  }
  completeNamed(r, nullptr);
}

void RuntimeImpl::runData(const Response& r) {
  if (sets_.setRank(r.processSetId) < 0) return;  // not a member: nothing to run here
  Communicator* comm = sets_.communicator(r.processSetId);

  // Take the entries out of the queue before running, so that a frontend woken by completion
  // can reuse the name at once.
  std::vector<std::unique_ptr<TensorEntry>> owned;
  std::vector<TensorEntry*> entries;
  owned.reserve(r.names.size());
  entries.reserve(r.names.size());
  for (size_t i = 0; i < r.names.size(); ++i) {
    auto key = tensorKey(r.processSetId, r.names[i]);
    auto e = queue_.remove(key);
    finishedKey(key);
    HORA_CHECK(e != nullptr || r.withJoinedRanks,
               "response for tensor '" + r.names[i] + "' this rank never enqueued");
    entries.push_back(e.get());
    if (e && i < r.cacheSlots.size() && r.cacheSlots[i] >= 0) {
      singleResponseInto(r, i, sets_.size(r.processSetId), &cachedScratch_);
      participant_.recordCached(r.cacheSlots[i], key, e->request, cachedScratch_);
    }
    owned.push_back(std::move(e));
  }
  std::vector<int> setRanks = sets_.ranks(r.processSetId);
  if (onGpu(r, owned)) {
    if (!gpu_) {
      gpu_ = std::make_unique<GpuExecutor>(gpu::gpuLibrary(), *store_, connectOptions_,
                                           secondsToMillis(settings_.timeoutSeconds),
                                           secondsToMillis(settings_.startTimeoutSeconds));
    }
    // The global set's allreduce runs hierarchically on GPUs too when every rank asked for it.
    HierarchicalCommunicator* hierarchy =
        r.kind == OpKind::Allreduce ? gpuHierarchy(comm) : nullptr;
    gpu_->run(r, std::move(owned), setRanks, &timeline_, hierarchy);
    return;
  }
  OpContext cx{*comm, fusion_, setRanks, std::move(entries), &timeline_};
  bool recording = timeline_.enabled();
  if (recording) {
    for (const auto& name : r.names) timeline_.opStart(r.processSetId, name, opKindName(r.kind));
  }
  executeResponse(r, cx);
  if (recording) {
    for (size_t i = 0; i < r.names.size(); ++i) {
      TensorEntry* e = cx.entries[i];
      timeline_.opEnd(r.processSetId, r.names[i], dtypeName(r.dtype),
                      e != nullptr ? shapeString(e->tensor.shape) : "[]");
    }
  }
}

// The response's device is rank 0's; a rank's own tensors say where its part lives.
bool RuntimeImpl::onGpu(const Response& r,
                        const std::vector<std::unique_ptr<TensorEntry>>& owned) const {
  for (const auto& e : owned) {
    if (e) return !e->tensor.device.isCpu();
  }
  return r.device >= 0;
}

void RuntimeImpl::applyProcessSetChange(const Response& r, TensorEntry* entry) {
  if (r.kind == OpKind::AddProcessSet) {
    int id = r.processSet.id;
    std::vector<int> ranks(r.processSet.ranks.begin(), r.processSet.ranks.end());
    bool member = std::binary_search(ranks.begin(), ranks.end(), topology_.rank);
    sets_.add(id, ranks, member ? world_->subset(ranks) : nullptr);
    if (entry != nullptr) entry->handle->processSetId = id;
  } else {
    sets_.remove(r.processSet.id);
    if (gpu_) gpu_->forgetProcessSet(r.processSet.id);
  }
}

void RuntimeImpl::stop(const std::string& reason, bool failure) {
  // Tell the other ranks first, so they fail their pending work now rather than at a timeout.
  if (coordinator_ && failure && control_) {
    ResponseBatch b;
    b.shutdown = true;
    b.shutdownReason = reason;
    std::string bytes = encodeResponseBatch(b);
    for (int r = 1; r < topology_.size; ++r) {
      try {
        sendControl(r, bytes);
      } catch (const std::exception&) {
        // That rank is gone too.
      }
    }
  }
  std::string message = failure ? "Hora stopped after a failure: " + reason : reason;
  auto error = std::make_exception_ptr(ShutdownError(message));
  if (gpu_) {
    // Work already on the device finishes on a clean stop; after a failure it is aborted.
    if (!failure) {
      try {
        gpu_->drain(Clock::now() + secondsToMillis(settings_.timeoutSeconds));
      } catch (const std::exception& e) {
        HORA_LOG(Warning, "GPU work failed during shutdown: " << e.what());
      }
    }
    gpu_->failAll(error);
  }
  auto pending = queue_.closeAndDrain(message);
  for (auto& e : pending) e->handle->complete(error);
  {
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    // Closing connections now lets peers blocked on this rank fail at once.
    sets_.releaseCommunicators();
    world_.reset();
    control_.reset();
  }
}

}  // namespace hora
