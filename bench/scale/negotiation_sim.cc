#include "bench/scale/negotiation_sim.h"

#include <time.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <utility>

#include "bench/scale/memory_estimate.h"
#include "core/common/errors.h"
#include "core/fusion/fusion_planner.h"

namespace hora {
namespace scale {
namespace {

double threadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Adds the thread CPU time `fn` takes to *sum.
template <typename Fn>
auto timed(double* sum, Fn&& fn) {
  double start = threadCpuSeconds();
  if constexpr (std::is_void_v<decltype(fn())>) {
    fn();
    *sum += threadCpuSeconds() - start;
  } else {
    auto result = fn();
    *sum += threadCpuSeconds() - start;
    return result;
  }
}

std::string tensorName(int i) { return "grad." + std::to_string(i); }

// Cycles after the last part before a step that has not finished is a simulator bug.
constexpr int kMaxExtraCycles = 16;

}  // namespace

struct NegotiationSim::Rank {
  explicit Rank(size_t capacity) : participant(capacity) {}
  TensorQueue queue;
  Participant participant;
  Response scratch;
  size_t completed = 0;  // tensors of this step completed here
};

NegotiationSim::NegotiationSim(const SimConfig& config)
    : config_(config), sets_(0), net_(config.worldSize) {
  HORA_CHECK(config.worldSize >= 2 && config.tensors >= 1 && config.chunks >= 1,
             "scale simulator: bad configuration");
  settings_.cacheCapacity = config.cacheCapacity;
  settings_.fusionThreshold = config.fusionThreshold;
  std::vector<int> world(static_cast<size_t>(config.worldSize));
  std::iota(world.begin(), world.end(), 0);
  sets_.add(0, world, nullptr);
  for (int r = 0; r < config.worldSize; ++r) {
    ranks_.push_back(std::make_unique<Rank>(static_cast<size_t>(config.cacheCapacity)));
  }
  coordinator_ = std::make_unique<Coordinator>(config.worldSize, sets_, settings_, 1);
  std::vector<int> same(static_cast<size_t>(config.tensors));
  std::iota(same.begin(), same.end(), 0);
  order_.assign(static_cast<size_t>(config.worldSize), same);
}

NegotiationSim::~NegotiationSim() = default;

void NegotiationSim::submit(int rank, int first, int count) {
  std::vector<TensorEntry> group;
  const int64_t elements = config_.tensorBytes / 4;
  for (int k = first; k < first + count; ++k) {
    TensorEntry e;
    e.request.kind = OpKind::Allreduce;
    e.request.name = tensorName(order_[rank][k]);
    e.request.rank = rank;
    e.request.dtype = DataType::Float32;
    e.request.shape = {elements};
    e.request.callSite = config_.callSite;
    e.tensor.dtype = DataType::Float32;
    e.tensor.shape = {elements};
    group.push_back(std::move(e));
  }
  ranks_[rank]->queue.push(std::move(group));
}

StepStats NegotiationSim::runStep() {
  StepStats stats;
  net_.resetCounters();
  peakPendingBytes_ = 0;
  if (config_.randomOrder) {
    for (int r = 0; r < config_.worldSize; ++r) {
      std::mt19937_64 rng(config_.seed * 1000003u + step_ * 7919u + static_cast<uint64_t>(r));
      std::shuffle(order_[r].begin(), order_[r].end(), rng);
    }
  }
  for (auto& rank : ranks_) rank->completed = 0;
  const int perChunk = (config_.tensors + config_.chunks - 1) / config_.chunks;
  for (int first = 0; first < config_.tensors; first += perChunk) {
    const int count = std::min(perChunk, config_.tensors - first);
    for (int r = 0; r < config_.worldSize; ++r) submit(r, first, count);
    submittedAll_ = first + count >= config_.tensors;
    cycle(&stats);
  }
  for (int extra = 0; !allDone(); ++extra) {
    HORA_CHECK(extra < kMaxExtraCycles, "scale simulator: a step did not finish");
    cycle(&stats);
  }
  stats.rank0 = net_.counters(0);
  stats.rank1 = net_.counters(1);
  ++step_;
  return stats;
}

bool NegotiationSim::allDone() const {
  for (const auto& rank : ranks_) {
    if (rank->completed < static_cast<size_t>(config_.tensors)) return false;
  }
  return true;
}

void NegotiationSim::cycle(StepStats* stats) {
  ++stats->cycles;
  // Every rank collects what is new (and what it must resend) and sends it to rank 0; rank 0
  // ingests its own batch directly, as the runtime does.
  for (int r = 0; r < config_.worldSize; ++r) {
    Rank& rank = *ranks_[r];
    RequestBatch batch = rank.participant.collect(rank.queue, rank.queue.takeNew());
    if (batch.requests.empty() && batch.cacheBits.empty()) continue;
    batch.waiting = submittedAll_;
    stats->fullRequests += static_cast<int>(batch.requests.size());
    if (r == 0) {
      timed(&stats->ingestCpuS, [&] { coordinator_->ingest(0, std::move(batch)); });
    } else {
      net_.send(r, 0, std::make_shared<const std::string>(encodeRequestBatch(batch)));
    }
  }
  // Decoded first, then ingested in arrival order, so that each phase is timed once: reading the
  // thread's CPU clock is a system call (about a microsecond), which timing each of N batches
  // would add N times.
  std::vector<SimMessage> arrived = net_.drain(0);
  std::vector<RequestBatch> batches(arrived.size());
  timed(&stats->decodeCpuS, [&] {
    for (size_t i = 0; i < arrived.size(); ++i) batches[i] = decodeRequestBatch(*arrived[i].bytes);
  });
  timed(&stats->ingestCpuS, [&] {
    for (size_t i = 0; i < arrived.size(); ++i) {
      coordinator_->ingest(arrived[i].from, std::move(batches[i]));
    }
  });
  stats->peakPending = std::max(stats->peakPending, coordinator_->pending().size());
  peakPendingBytes_ = std::max(peakPendingBytes_, pendingBytes(*coordinator_));
  double liveness = 0, deadlock = 0;
  timed(&liveness, [&] { return coordinator_->awaitedRanks(); });
  timed(&deadlock, [&] { return coordinator_->failDeadlocks(Clock::now()); });
  stats->livenessCpuS = std::max(stats->livenessCpuS, liveness);
  stats->deadlockCpuS = std::max(stats->deadlockCpuS, deadlock);
  for (;;) {
    ResponseBatch batch;
    bool built = timed(&stats->buildCpuS, [&] { return coordinator_->buildBatch(&batch); });
    if (!built) break;
    ++stats->responseBatches;
    stats->collectives += static_cast<int>(batch.responses.size());
    auto bytes = timed(&stats->encodeCpuS, [&] {
      return std::make_shared<const std::string>(encodeResponseBatch(batch));
    });
    for (int r = 1; r < config_.worldSize; ++r) net_.send(0, r, bytes);
    apply(*ranks_[0], batch);
  }
  for (int r = 1; r < config_.worldSize; ++r) {
    for (const SimMessage& m : net_.drain(r)) apply(*ranks_[r], decodeResponseBatch(*m.bytes));
  }
}

// What RuntimeImpl::applyBatch does with a batch, without running collectives.
void NegotiationSim::apply(Rank& rank, const ResponseBatch& batch) {
  // Every simulated tensor is in the global set.
  std::vector<Response> hits =
      rank.participant.rebuildHits(batch.responses, [](int32_t) { return true; });
  rank.participant.applyEvictions(batch.evictedSlots);
  size_t hit = 0;
  for (const Response& sent : batch.responses) {
    const Response& r = sent.slotsOnly() ? hits[hit++] : sent;
    HORA_CHECK(r.kind == OpKind::Allreduce, std::string("scale simulator: unexpected response ") +
                                                opKindName(r.kind) + ": " + r.errorMessage);
    for (size_t i = 0; i < r.names.size(); ++i) {
      std::string key = tensorKey(r.processSetId, r.names[i]);
      auto e = rank.queue.remove(key);
      rank.participant.finished(key);
      HORA_CHECK(e != nullptr, "scale simulator: a response for a tensor never submitted");
      if (i < r.cacheSlots.size() && r.cacheSlots[i] >= 0) {
        singleResponseInto(r, i, config_.worldSize, &rank.scratch);
        rank.participant.recordCached(r.cacheSlots[i], key, e->request, rank.scratch);
      }
      ++rank.completed;
    }
  }
  rank.participant.batchApplied();
}

MemoryStats NegotiationSim::memory() const {
  MemoryStats m;
  // Rank 1's cache copy holds the same slots as rank 0's coordinator cache (slot numbers agree
  // on every rank); each slot's request is that tensor's request as any rank submits it.
  const Participant& p = ranks_[1]->participant;
  const size_t capacity = static_cast<size_t>(config_.cacheCapacity);
  size_t cache = capacity * emptyCacheSlotBytes();
  Request sample;
  sample.name = tensorName(config_.tensors - 1);
  sample.shape = {config_.tensorBytes / 4};
  sample.callSite = config_.callSite;
  const size_t cached = std::min(capacity, static_cast<size_t>(config_.tensors));
  if (cached > 0) {
    // Every cached tensor's entry has the same shape; one of them stands for all.
    Response r;
    r.names = {sample.name};
    r.elementCounts = {config_.tensorBytes / 4};
    r.cacheSlots = {0};
    cache += cached * cacheEntryBytes(tensorKey(0, sample.name), sample, r);
  }
  // While a step is in flight every tensor is outstanding: one map node, its key and a slot.
  const size_t keyBytes = sizeof(std::string) + stringHeap(tensorKey(0, sample.name));
  m.participantBytes = sizeof(Participant) + cache +
                       static_cast<size_t>(config_.tensors) * (kNodeBytes + keyBytes + sizeof(int));
  (void)p;
  m.coordinatorPendingBytes = peakPendingBytes_;
  m.coordinatorBytes =
      coordinatorFixedBytes(config_.worldSize, capacity) + cache + peakPendingBytes_;
  m.queueBytes = static_cast<size_t>(config_.tensors) *
                 (kNodeBytes + sizeof(std::string) + stringHeap(tensorKey(0, sample.name)) +
                  sizeof(TensorEntry) + requestHeap(sample) + sizeof(int64_t));
  return m;
}

}  // namespace scale
}  // namespace hora
