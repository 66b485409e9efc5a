// Negotiation without a transport: N participants and one coordinator exchange batches directly.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "core/common/errors.h"
#include "core/coordinator/codec.h"
#include "core/coordinator/coordinator.h"
#include "core/coordinator/participant.h"
#include "core/coordinator/tensor_queue.h"
#include "core/fusion/fusion_planner.h"

namespace hora {
namespace {

class Job {
 public:
  Job(int n, int cacheCapacity, int64_t fusion = 1 << 20) : sets_(0) {
    std::vector<int> all;
    for (int i = 0; i < n; ++i) all.push_back(i);
    sets_.add(0, all, nullptr);
    Settings s;
    s.cacheCapacity = cacheCapacity;
    s.fusionThreshold = fusion;
    coordinator_ = std::make_unique<Coordinator>(n, sets_, s, 1);
    for (int i = 0; i < n; ++i) {
      queues_.push_back(std::make_unique<TensorQueue>());
      participants_.push_back(std::make_unique<Participant>(cacheCapacity));
    }
  }

  void enqueue(int rank, const std::string& name, std::vector<int64_t> shape,
               OpKind kind = OpKind::Allreduce, DataType dtype = DataType::Float32,
               const std::function<void(Request&)>& tweak = nullptr) {
    TensorEntry e;
    e.request.kind = kind;
    e.request.name = name;
    e.request.rank = rank;
    e.request.shape = std::move(shape);
    e.request.dtype = dtype;
    if (tweak) tweak(e.request);
    e.handle = std::make_shared<Handle>();
    std::vector<TensorEntry> group;
    group.push_back(std::move(e));
    queues_[rank]->push(std::move(group));
  }

  // One rank sends what it has; returns the batch it sent.
  RequestBatch send(int rank) {
    RequestBatch b = participants_[rank]->collect(*queues_[rank], queues_[rank]->takeNew());
    coordinator_->ingest(rank, b);
    return b;
  }

  // Coordinator answers; every rank applies the batch: rank 0 the batch it built, the others the
  // batch as it arrives over the wire (cache hits as slots alone), as the background loop does.
  // Returns rank 0's responses.
  std::vector<Response> answer() {
    ResponseBatch batch;
    if (!coordinator_->buildBatch(&batch)) return {};
    lastSent_ = encodeResponseBatch(batch);
    ResponseBatch arrived = decodeResponseBatch(lastSent_);
    for (size_t rank = 0; rank < queues_.size(); ++rank) {
      auto& p = *participants_[rank];
      const ResponseBatch& b = rank == 0 ? batch : arrived;
      std::vector<Response> hits = p.rebuildHits(b.responses, [](int32_t) { return true; });
      p.applyEvictions(b.evictedSlots);
      size_t hit = 0;
      for (const auto& sent : b.responses) {
        const Response& r = sent.slotsOnly() ? hits[hit++] : sent;
        for (size_t i = 0; i < r.names.size(); ++i) {
          auto key = tensorKey(r.processSetId, r.names[i]);
          auto e = queues_[rank]->remove(key);
          if (!e) continue;
          p.finished(key);
          if (i < r.cacheSlots.size() && r.cacheSlots[i] >= 0) {
            p.recordCached(r.cacheSlots[i], key, e->request,
                           singleResponse(r, i, static_cast<int>(queues_.size())));
          }
        }
      }
      p.batchApplied();
    }
    return batch.responses;
  }

  // What a rank would send, without delivering it yet.
  RequestBatch participantsCollectOnly(int rank) {
    return participants_[rank]->collect(*queues_[rank], queues_[rank]->takeNew());
  }

  Coordinator& coordinator() { return *coordinator_; }
  // The last batch answer() sent to the other ranks, encoded.
  const std::string& lastSent() const { return lastSent_; }

 private:
  std::string lastSent_;
  ProcessSetTable sets_;
  std::unique_ptr<Coordinator> coordinator_;
  std::vector<std::unique_ptr<TensorQueue>> queues_;
  std::vector<std::unique_ptr<Participant>> participants_;
};

// The job's next answer is one allreduce of `elements`, with zeros for joined ranks or without.
void expectOneAllreduce(Job& job, int64_t elements, bool withJoinedRanks = false) {
  auto out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, OpKind::Allreduce);
  EXPECT_EQ(out[0].elementCounts, (std::vector<int64_t>{elements}));
  EXPECT_EQ(out[0].withJoinedRanks, withJoinedRanks);
}

// Found by the scale simulator (bench/scale/): with a full cache, one batch can answer a tensor
// from its slot and then evict that slot for another tensor. Applying the eviction first queues
// the tensor for resending; the response then finishes it. When the name is submitted again
// before the next collect, it must go out once, not from the resend list and again as new.
TEST(Participant, ResendOfATensorAnsweredInTheSameBatchIsDropped) {
  Participant p(2);
  TensorQueue q;
  auto push = [&q] {
    TensorEntry e;
    e.request.name = "x";
    e.request.shape = {4};
    std::vector<TensorEntry> group;
    group.push_back(std::move(e));
    q.push(std::move(group));
  };
  const std::string key = tensorKey(0, "x");
  Request cachedRequest;
  cachedRequest.name = "x";
  cachedRequest.shape = {4};
  Response cachedResponse;
  cachedResponse.names = {"x"};
  cachedResponse.elementCounts = {4};
  p.recordCached(0, key, cachedRequest, cachedResponse);
  push();
  RequestBatch first = p.collect(q, q.takeNew());
  EXPECT_TRUE(first.requests.empty());
  ASSERT_EQ(first.cacheBits.size(), 1u);
  // The batch: evicts slot 0 (x is queued for resending), then answers x.
  p.applyEvictions({0});
  ASSERT_TRUE(p.hasResends());
  q.remove(key);
  p.finished(key);
  p.batchApplied();
  // The next step submits x again before the next collect.
  push();
  RequestBatch next = p.collect(q, q.takeNew());
  ASSERT_EQ(next.requests.size(), 1u) << "x sent twice: the coordinator would count it twice";
  EXPECT_EQ(next.requests[0].name, "x");
  EXPECT_FALSE(p.hasResends());
}

TEST(Coordinator, ReadyOnlyWhenEveryRankAsked) {
  Job job(3, 16);
  job.enqueue(0, "a", {4});
  job.enqueue(1, "a", {4});
  job.send(0);
  job.send(1);
  EXPECT_TRUE(job.answer().empty());
  job.enqueue(2, "a", {4});
  job.send(2);
  expectOneAllreduce(job, 4);
}

// A hit that arrived as slots alone is rebuilt from the rank's own cache, fused in the order of
// its slots; a slot the rank does not hold means the caches went out of step, a protocol error.
TEST(Participant, HitsArrivingAsSlotsAreRebuiltFromTheCache) {
  Participant p(4);
  for (int slot : {1, 2}) {
    Response single;
    single.names = {"t" + std::to_string(slot)};
    single.elementCounts = {slot * 10};
    single.cacheSlots = {slot};
    Request request;
    request.name = single.names[0];
    p.recordCached(slot, tensorKey(0, request.name), request, single);
  }
  Response full;
  full.names = {"other"};
  Response hit;
  hit.cacheHit = true;
  hit.cacheSlots = {2, 1};
  auto member = [](int32_t set) { return set == 0; };
  std::vector<Response> rebuilt = p.rebuildHits({full, hit}, member);
  ASSERT_EQ(rebuilt.size(), 1u) << "only the slots-only response is rebuilt";
  EXPECT_EQ(rebuilt[0].names, (std::vector<std::string>{"t2", "t1"}));
  EXPECT_EQ(rebuilt[0].elementCounts, (std::vector<int64_t>{20, 10}));
  EXPECT_EQ(rebuilt[0].cacheSlots, (std::vector<int32_t>{2, 1}));
  // Outside the response's process set, the rank holds none of its slots and runs nothing.
  Response elsewhere = hit;
  elsewhere.processSetId = 5;
  elsewhere.cacheSlots = {3};
  rebuilt = p.rebuildHits({elsewhere}, member);
  ASSERT_EQ(rebuilt.size(), 1u);
  EXPECT_TRUE(rebuilt[0].names.empty());
  EXPECT_EQ(rebuilt[0].processSetId, 5);
  for (int32_t bad : {3, 4, -1}) {
    hit.cacheSlots = {1, bad};
    try {
      p.rebuildHits({hit}, member);
      FAIL() << "rebuilt a hit of slot " << bad;
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("cache slot " + std::to_string(bad)), std::string::npos)
          << e.what();
    }
  }
}

TEST(Coordinator, SecondStepTravelsAsCacheBits) {
  Job job(2, 16);
  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < 2; ++r) {
      job.enqueue(r, "a", {4});
      job.enqueue(r, "b", {8});
    }
    RequestBatch b0 = job.send(0);
    job.send(1);
    if (step == 0) {
      EXPECT_EQ(b0.requests.size(), 2u);
    } else {
      EXPECT_TRUE(b0.requests.empty());
      ASSERT_EQ(b0.cacheBits.size(), 1u);
      EXPECT_EQ(__builtin_popcountll(b0.cacheBits[0]), 2);
    }
    auto out = job.answer();
    ASSERT_EQ(out.size(), 1u) << "a and b fuse";
    EXPECT_EQ(out[0].names.size(), 2u);
  }
}

// From the second step on, the response batch names its fused tensors by their cache slots: its
// size does not depend on the names, however long (at thousands of ranks, repeating them was
// most of what rank 0 sent per step).
TEST(Coordinator, CachedResponsesTravelWithoutTheirNames) {
  const std::string longName(2000, 'n');
  Job job(3, 16);
  for (int step = 0; step < 3; ++step) {
    for (int r = 0; r < 3; ++r) {
      job.enqueue(r, longName + "a", {4});
      job.enqueue(r, longName + "b", {8});
    }
    for (int r = 0; r < 3; ++r) job.send(r);
    auto out = job.answer();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].names.size(), 2u);
    if (step == 0) {
      EXPECT_GT(job.lastSent().size(), 2 * longName.size());
    } else {
      EXPECT_LT(job.lastSent().size(), 64u) << "step " << step << " repeated the names";
    }
  }
  // A new tensor fused with cached ones: the fused response is no hit, and travels in full.
  for (int r = 0; r < 3; ++r) {
    job.enqueue(r, longName + "a", {4});
    job.enqueue(r, "new", {2});
  }
  for (int r = 0; r < 3; ++r) job.send(r);
  auto out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].names.size(), 2u);
  EXPECT_FALSE(out[0].cacheHit);
  EXPECT_GT(job.lastSent().size(), longName.size());
}

// Cached reports are counted per rank (core/coordinator/cache_hits.h): with ranks in three words
// of the table, the tensor waits for the last one, and the coordinator names who reported.
TEST(Coordinator, CachedTensorOfALargeJobWaitsForItsLastRank) {
  const int n = 130;
  Job job(n, 4);
  for (int r = 0; r < n; ++r) job.enqueue(r, "a", {4});
  for (int r = 0; r < n; ++r) job.send(r);
  ASSERT_EQ(job.answer().size(), 1u);
  for (int r = 0; r < n - 1; ++r) job.enqueue(r, "a", {4});
  for (int r = 0; r < n - 1; ++r) EXPECT_TRUE(job.send(r).requests.empty()) << "rank " << r;
  EXPECT_TRUE(job.answer().empty()) << "ready before rank " << n - 1 << " reported";
  const PendingTensor& p = job.coordinator().pending().begin()->second;
  std::vector<int> reported = job.coordinator().submitters(p);
  ASSERT_EQ(reported.size(), static_cast<size_t>(n - 1));
  EXPECT_EQ(reported.front(), 0);
  EXPECT_EQ(reported.back(), n - 2);
  EXPECT_EQ(job.coordinator().awaitedRanks(), (std::vector<int>{n - 1}));
  job.enqueue(n - 1, "a", {4});
  job.send(n - 1);
  auto out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].cacheSlots, (std::vector<int32_t>{0}));
  EXPECT_TRUE(job.coordinator().pending().empty());
}

// The ranks the liveness check waits for come from whole-word scans of who asked (full requests
// and cache bits alike) and who joined; ranks past the last word's end never appear.
TEST(Coordinator, AwaitedRanksAreTheRanksNeitherAskingNorJoined) {
  const int n = 130;
  Job job(n, 4);
  for (int r = 0; r < n; ++r) {
    if (r == 3 || r == 127) continue;
    job.enqueue(r, "a", {4});  // in full
    job.send(r);
  }
  EXPECT_EQ(job.coordinator().awaitedRanks(), (std::vector<int>{3, 127}));
  job.enqueue(3, "a", {4});
  job.send(3);
  job.enqueue(127, "a", {4});
  job.send(127);
  ASSERT_EQ(job.answer().size(), 1u);  // "a" is cached now
  for (int r = 0; r < n; ++r) {
    if (r == 64 || r == 128 || r == 129) continue;
    job.enqueue(r, "a", {4});  // by cache bit
    EXPECT_TRUE(job.send(r).requests.empty());
  }
  job.enqueue(129, "join.noname", {}, OpKind::Join);
  job.send(129);
  EXPECT_EQ(job.coordinator().awaitedRanks(), (std::vector<int>{64, 128}));
}

TEST(Coordinator, NewShapeUnderSameNameRenegotiates) {
  Job job(2, 16);
  for (int r = 0; r < 2; ++r) job.enqueue(r, "a", {4});
  job.send(0);
  job.send(1);
  job.answer();
  for (int r = 0; r < 2; ++r) job.enqueue(r, "a", {6});
  EXPECT_EQ(job.send(0).requests.size(), 1u);
  job.send(1);
  expectOneAllreduce(job, 6);
}

TEST(Coordinator, MismatchNamesEveryRank) {
  Job job(3, 16);
  job.enqueue(0, "t", {2, 3});
  job.enqueue(1, "t", {2, 3});
  job.enqueue(2, "t", {4});
  for (int r = 0; r < 3; ++r) job.send(r);
  auto out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, OpKind::Error);
  const auto& m = out[0].errorMessage;
  EXPECT_NE(m.find("Mismatched ALLREDUCE tensor shapes"), std::string::npos) << m;
  EXPECT_NE(m.find("'t'"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 0: [2, 3]"), std::string::npos) << m;
  EXPECT_NE(m.find("rank 2: [4]"), std::string::npos) << m;
}

// Whatever order the requests arrive in, the message lists the ranks in rank order, as does
// what the response is built from.
TEST(Coordinator, RequestsArrivingOutOfOrderAreTakenInRankOrder) {
  Job job(3, 16);
  job.enqueue(0, "t", {2});
  job.enqueue(1, "t", {3});
  job.enqueue(2, "t", {4});
  for (int r : {2, 0, 1}) job.send(r);
  auto out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  const auto& m = out[0].errorMessage;
  EXPECT_NE(m.find("rank 0: [2], rank 1: [3], rank 2: [4]"), std::string::npos) << m;
}

TEST(Coordinator, DtypeMismatch) {
  Job job(2, 16);
  job.enqueue(0, "t", {2}, OpKind::Allreduce, DataType::Float32);
  job.enqueue(1, "t", {2}, OpKind::Allreduce, DataType::Int32);
  job.send(0);
  job.send(1);
  auto out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].errorMessage.find("Mismatched data types"), std::string::npos);
  EXPECT_NE(out[0].errorMessage.find("rank 1: int32"), std::string::npos);
}

// Every parameter that must agree across ranks: a difference on rank 1 is an error response
// that names what differs and what each rank asked for.
TEST(Coordinator, EveryAgreementCheckNamesEachRanksValue) {
  struct Disagreement {
    const char* what;
    std::function<void(Request&, bool odd)> tweak;
    std::vector<std::string> expected;
  };
  const std::vector<Disagreement> cases = {
      {"op kind",
       [](Request& r, bool odd) { r.kind = odd ? OpKind::Allgather : OpKind::Allreduce; },
       {"Mismatched operations", "rank 0: ALLREDUCE", "rank 1: ALLGATHER"}},
      {"reduce op",
       [](Request& r, bool odd) { r.reduceOp = odd ? ReduceOp::Max : ReduceOp::Sum; },
       {"Mismatched reduction operations", "rank 1: MAX"}},
      {"reducescatter op",
       [](Request& r, bool odd) {
         r.kind = OpKind::Reducescatter;
         r.reduceOp = odd ? ReduceOp::Min : ReduceOp::Sum;
       },
       {"Mismatched reduction operations", "rank 1: MIN"}},
      {"broadcast root",
       [](Request& r, bool odd) {
         r.kind = OpKind::Broadcast;
         r.rootRank = odd ? 1 : 0;
       },
       {"Mismatched BROADCAST root ranks", "rank 0: 0", "rank 1: 1"}},
      {"prescale",
       [](Request& r, bool odd) { r.prescale = odd ? 2.0 : 1.0; },
       {"Mismatched prescale factors", "rank 1: 2"}},
      {"postscale",
       [](Request& r, bool odd) { r.postscale = odd ? 0.5 : 1.0; },
       {"Mismatched postscale factors", "rank 1: 0.5"}},
      {"allgather rows",
       [](Request& r, bool odd) {
         r.kind = OpKind::Allgather;
         r.shape = {2, odd ? 4 : 3};
       },
       {"all dimensions but the first must match", "rank 0: [2, 3]", "rank 1: [2, 4]"}},
  };
  for (const auto& d : cases) {
    SCOPED_TRACE(d.what);
    Job job(2, 16);
    for (int r = 0; r < 2; ++r) {
      job.enqueue(r, "t", {2, 3}, OpKind::Allreduce, DataType::Float32,
                  [&](Request& q) { d.tweak(q, r == 1); });
    }
    job.send(0);
    job.send(1);
    auto out = job.answer();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].kind, OpKind::Error);
    for (const auto& piece : d.expected) {
      EXPECT_NE(out[0].errorMessage.find(piece), std::string::npos) << out[0].errorMessage;
    }
  }
}

TEST(Coordinator, CachedOnOneRankChangedOnAnotherStillRaisesMismatch) {
  Job job(2, 16);
  for (int r = 0; r < 2; ++r) job.enqueue(r, "a", {4});
  job.send(0);
  job.send(1);
  job.answer();
  job.enqueue(0, "a", {4});  // cache hit on rank 0
  job.enqueue(1, "a", {5});  // changed on rank 1
  EXPECT_FALSE(job.send(0).cacheBits.empty());
  job.send(1);
  auto out = job.answer();  // evicts the slot; rank 0 must resend in full
  EXPECT_TRUE(out.empty());
  RequestBatch again = job.send(0);
  EXPECT_EQ(again.requests.size(), 1u);
  out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, OpKind::Error);
  EXPECT_NE(out[0].errorMessage.find("rank 1: [5]"), std::string::npos);
}

TEST(Coordinator, StaleBitIsIgnoredAndResent) {
  Job job(2, 1);  // one slot: every new name evicts the previous one
  for (int r = 0; r < 2; ++r) job.enqueue(r, "a", {1});
  job.send(0);
  job.send(1);
  job.answer();  // a -> slot 0
  // Rank 0 reports a by bit; meanwhile b takes slot 0 before rank 0's bit arrives.
  job.enqueue(0, "a", {1});
  RequestBatch stale = job.participantsCollectOnly(0);
  for (int r = 0; r < 2; ++r) job.enqueue(r, "b", {1});
  job.send(0);
  job.send(1);
  job.answer();                        // b evicts a's slot
  job.coordinator().ingest(0, stale);  // too old: ignored
  EXPECT_TRUE(job.answer().empty());
  // Slot 0 now holds b. Rank 1 asks for b again (by bit); rank 0 has not. Counted as a hit, rank
  // 0's stale bit for a would make b ready and run it on a rank that never submitted it.
  job.enqueue(1, "b", {1});
  job.send(1);
  EXPECT_TRUE(job.answer().empty()) << "a stale bit counted as a hit on the slot's new tensor";
  job.enqueue(1, "a", {1});
  job.send(1);
  RequestBatch resent = job.send(0);  // rank 0 resends a in full after the eviction
  EXPECT_EQ(resent.requests.size(), 1u);
  auto out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].names[0], "a");
  // b runs once rank 0 asks for it too.
  job.enqueue(0, "b", {1});
  job.send(0);
  out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].names[0], "b");
}

TEST(Coordinator, JoinedRanksLetAllreduceRunAndJoinReturnsLastRank) {
  Job job(3, 16);
  job.enqueue(1, "join.noname", {}, OpKind::Join);
  job.enqueue(2, "join.noname", {}, OpKind::Join);
  job.send(1);
  job.send(2);
  EXPECT_TRUE(job.answer().empty());
  job.enqueue(0, "g", {3});
  job.send(0);
  expectOneAllreduce(job, 3, true);
  job.enqueue(0, "x", {3}, OpKind::Allgather);
  job.send(0);
  auto out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, OpKind::Error);
  EXPECT_NE(out[0].errorMessage.find("Allgather is not supported with Join"), std::string::npos);
  job.enqueue(0, "join.noname", {}, OpKind::Join);
  job.send(0);
  out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, OpKind::Join);
  EXPECT_EQ(out[0].lastJoinedRank, 0);
}

// While a rank has joined, an op that cannot run then fails for the rank that asks at once: the
// other ranks may ask under another name (automatic names count each rank's own calls).
TEST(Coordinator, WhileRanksJoinedUnsupportedOpsFailWithoutWaitingForOthers) {
  Job job(3, 16);
  for (int r = 0; r < 3; ++r) job.enqueue(r, "cached", {3}, OpKind::Allgather);
  for (int r = 0; r < 3; ++r) job.send(r);
  auto out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].kind, OpKind::Allgather);
  job.enqueue(0, "join.noname", {}, OpKind::Join);
  job.send(0);
  EXPECT_TRUE(job.answer().empty());
  auto expectJoinError = [&job](const std::string& name) {
    auto answered = job.answer();
    ASSERT_EQ(answered.size(), 1u);
    EXPECT_EQ(answered[0].kind, OpKind::Error);
    EXPECT_EQ(answered[0].names[0], name);
    EXPECT_NE(answered[0].errorMessage.find("Allgather is not supported with Join"),
              std::string::npos);
  };
  job.enqueue(1, "allgather.noname.0", {3}, OpKind::Allgather);
  job.send(1);
  expectJoinError("allgather.noname.0");
  job.enqueue(2, "allgather.noname.1", {3}, OpKind::Allgather);
  job.send(2);
  expectJoinError("allgather.noname.1");
  job.enqueue(1, "cached", {3}, OpKind::Allgather);
  EXPECT_FALSE(job.send(1).cacheBits.empty());  // reported by its cache bit
  expectJoinError("cached");
  // Allreduce still waits for every rank that has not joined.
  job.enqueue(1, "g", {3});
  job.send(1);
  EXPECT_TRUE(job.answer().empty());
  job.enqueue(2, "g", {3});
  job.send(2);
  expectOneAllreduce(job, 3, true);
}

// Full requests alike but for the rank are held as the first one and a bit per other rank: a
// tensor asked by 64 ranks holds one request until it runs, and runs only once the last asks.
TEST(Coordinator, RequestsAlikeAreHeldAsOneRequestAndABitPerRank) {
  const int n = 64;
  Job job(n, 16);
  for (int r = 0; r < n - 1; ++r) {
    job.enqueue(r, "t", {5});
    job.send(r);
  }
  EXPECT_TRUE(job.answer().empty());
  const PendingTensor& p = job.coordinator().pending().at(tensorKey(0, "t"));
  EXPECT_EQ(p.requests.size(), 1u);
  EXPECT_EQ(p.twinCount, n - 2);
  EXPECT_EQ(job.coordinator().submitters(p).size(), static_cast<size_t>(n - 1));
  EXPECT_EQ(job.coordinator().awaitedRanks(), (std::vector<int>{n - 1}));
  job.enqueue(n - 1, "t", {5});
  job.send(n - 1);
  expectOneAllreduce(job, 5);
}

// What only each rank knows (its first dimension for allgather, its splits for alltoall) is known
// for the ranks held as bits too.
TEST(Coordinator, AllgatherAndAlltoallOfRanksAlikeKnowEveryRanksRows) {
  Job job(4, 16);
  auto splits = [](Request& q) { q.splits = {1, 2, 0, 1}; };
  for (int r = 0; r < 4; ++r) {
    job.enqueue(r, "g", {2, 3}, OpKind::Allgather);
    job.enqueue(r, "a", {4}, OpKind::Alltoall, DataType::Float32, splits);
    job.send(r);
  }
  auto out = job.answer();
  ASSERT_EQ(out.size(), 2u);
  for (const Response& r : out) {
    if (r.kind == OpKind::Allgather) {
      EXPECT_EQ(r.gatheredRows, (std::vector<int64_t>{2, 2, 2, 2}));
    } else {
      ASSERT_EQ(r.kind, OpKind::Alltoall) << r.errorMessage;
      std::vector<int64_t> row = {1, 2, 0, 1};
      std::vector<int64_t> matrix;
      for (int i = 0; i < 4; ++i) matrix.insert(matrix.end(), row.begin(), row.end());
      EXPECT_EQ(r.splitsMatrix, matrix);
    }
  }
}

// A rank that differs lists every rank's value, those held as bits included, in rank order.
TEST(Coordinator, AMismatchAfterRanksAlikeListsEachOfThem) {
  Job job(4, 16);
  for (int r : {3, 0, 1, 2}) {
    job.enqueue(r, "t", {r == 1 ? 3 : 2});
    job.send(r);
  }
  auto out = job.answer();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].kind, OpKind::Error);
  const auto& m = out[0].errorMessage;
  EXPECT_NE(m.find("rank 0: [2], rank 1: [3], rank 2: [2], rank 3: [2]"), std::string::npos) << m;
}

// A request from another call site is kept in full: reports name each rank's own line.
TEST(Coordinator, ARequestFromAnotherCallSiteIsKeptInFull) {
  Job job(3, 16);
  auto at = [](const char* site) { return [site](Request& q) { q.callSite = site; }; };
  job.enqueue(0, "t", {2}, OpKind::Allreduce, DataType::Float32, at("train.py:10"));
  job.enqueue(1, "t", {2}, OpKind::Allreduce, DataType::Float32, at("train.py:12"));
  job.send(0);
  job.send(1);
  const PendingTensor& p = job.coordinator().pending().at(tensorKey(0, "t"));
  ASSERT_EQ(p.requests.size(), 2u);
  EXPECT_EQ(p.requests[1].callSite, "train.py:12");
  EXPECT_EQ(p.twinCount, 0);
}

// A rank held as a bit that then joined still counts as one that asked, and only once: the
// tensor waits for every rank that has not joined.
TEST(Coordinator, ARankAlikeThatJoinedCountsOnce) {
  Job job(4, 16);
  job.enqueue(0, "g", {3});
  job.send(0);
  job.enqueue(1, "g", {3});
  job.send(1);
  job.enqueue(1, "join.noname", {}, OpKind::Join);
  job.send(1);
  job.enqueue(2, "g", {3});
  job.send(2);
  EXPECT_TRUE(job.answer().empty()) << "ran before rank 3 asked";
  job.enqueue(3, "g", {3});
  job.send(3);
  expectOneAllreduce(job, 3, true);
}

TEST(Coordinator, ShutdownFromAnyRankEndsTheJob) {
  Job job(2, 16);
  RequestBatch b;
  b.shutdown = true;
  job.coordinator().ingest(1, b);
  ResponseBatch out;
  ASSERT_TRUE(job.coordinator().buildBatch(&out));
  EXPECT_TRUE(out.shutdown);
  EXPECT_NE(out.shutdownReason.find("rank 1"), std::string::npos);
}

}  // namespace
}  // namespace hora
