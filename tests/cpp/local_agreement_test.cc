// Local agreement on cached tensors (core/coordinator/local_agreement.h): the round logic against
// an in-memory board, then end to end through the engine over shared memory, where cached steps
// must need no control message at all and every way out to the coordinator must still work.
#include "core/coordinator/local_agreement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>

#include "core/common/errors.h"
#include "core/runtime.h"
#include "core/transport/solo_board.h"
#include "tests/cpp/runtime_job.h"

namespace hora {
namespace {

// Every rank's published rounds, in one process. publish() checks the board's promise: a rank
// publishes round k + 1 only once every rank has published round k.
struct SharedRounds {
  explicit SharedRounds(int n) : latest(n, 0), rounds(n, std::vector<AgreementBoard::Round>(2)) {}
  std::vector<uint32_t> latest;
  std::vector<std::vector<AgreementBoard::Round>> rounds;
};

class MemoryBoard : public AgreementBoard {
 public:
  MemoryBoard(SharedRounds& shared, int rank) : shared_(shared), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(shared_.latest.size()); }
  void publish(uint32_t round, const Round& mine) override {
    EXPECT_EQ(round, shared_.latest[rank_] + 1);
    for (uint32_t other : shared_.latest) EXPECT_GE(other + 1, round) << "a round ahead of a peer";
    shared_.rounds[rank_][round & 1] = mine;
    shared_.latest[rank_] = round;
  }
  uint32_t published(int r) const override { return shared_.latest[r]; }
  void read(int r, uint32_t round, Round* out) const override {
    EXPECT_LE(round, shared_.latest[r]);
    EXPECT_LE(shared_.latest[r], round + 1) << "a round read after it was overwritten";
    *out = shared_.rounds[r][round & 1];
  }
  void looked() override {}

 private:
  SharedRounds& shared_;
  int rank_;
};

using Rounds = std::vector<std::vector<int>>;

constexpr Millis kCycle{1};
constexpr Millis kHandOver{10};
constexpr Millis kOpenBound{1000};

struct Ranks {
  explicit Ranks(int n) : shared(n) {
    for (int r = 0; r < n; ++r) {
      agreements.push_back(std::make_unique<LocalAgreement>(
          std::make_unique<MemoryBoard>(shared, r), kHandOver, kOpenBound));
    }
  }
  LocalAgreement& operator[](int r) { return *agreements[r]; }
  SharedRounds shared;
  std::vector<std::unique_ptr<LocalAgreement>> agreements;
};

Clock::time_point at(int ms) { return Clock::time_point() + Millis(1000 + ms); }

TEST(LocalAgreementRounds, SlotsEveryRankHoldsRunInSlotOrderOnEveryRank) {
  Ranks ranks(3);
  for (int r = 0; r < 3; ++r) {
    for (int slot : {9, 2, 700}) ranks[r].hold(slot, "t" + std::to_string(slot), at(0));
  }
  ranks[1].hold(5, "t5", at(0));                               // only rank 1 has this one yet
  EXPECT_TRUE(ranks[0].step(4, at(0), kCycle).ready.empty());  // published, others have not
  EXPECT_TRUE(ranks[0].open());
  EXPECT_FALSE(ranks[0].resolvable());
  ranks[1].step(4, at(0), kCycle);
  auto last = ranks[2].step(4, at(0), kCycle);  // publishes last, so resolves at once
  EXPECT_EQ(last.ready, (Rounds{{2, 9, 700}}));
  for (int r : {0, 1}) {
    auto out = ranks[r].step(4, at(0), kCycle);
    EXPECT_EQ(out.ready, (Rounds{{2, 9, 700}})) << "rank " << r;
    EXPECT_TRUE(out.handOver.empty());
  }
  EXPECT_EQ(ranks[1].held(), 1u);
  EXPECT_EQ(ranks[0].held(), 0u);
}

TEST(LocalAgreementRounds, ARankAloneRunsWhatItHoldsInTheStepThatPublishesIt) {
  LocalAgreement alone(std::make_unique<SoloBoard>(), kHandOver, kOpenBound);
  for (int step = 0; step < 3; ++step) {
    alone.hold(7, "a", at(step));
    alone.hold(2, "b", at(step));
    EXPECT_EQ(alone.step(1, at(step), kCycle).ready, (Rounds{{2, 7}})) << "step " << step;
    EXPECT_FALSE(alone.open());
    EXPECT_EQ(alone.held(), 0u);
  }
}

// The int32 values of each rank's payload in an outcome's round `i`.
std::vector<std::vector<int32_t>> payloadValues(const LocalAgreement::Outcome& out, size_t i,
                                                size_t count) {
  std::vector<std::vector<int32_t>> values;
  for (const uint8_t* p : out.payloads.at(i)) {
    std::vector<int32_t> v(count);
    std::memcpy(v.data(), p, count * sizeof(int32_t));
    values.push_back(v);
  }
  return values;
}

TEST(LocalAgreementPayloads, ALoneSlotsDataGoesWithItsRoundToEveryRank) {
  Ranks ranks(3);
  std::vector<std::vector<int32_t>> data = {{1, 2}, {11, 12}, {21, 22}};
  for (int r = 0; r < 3; ++r) ranks[r].hold(4, "t4", at(0), {data[r].data(), 8});
  ranks[0].step(0, at(0), kCycle);
  ranks[1].step(0, at(0), kCycle);
  auto last = ranks[2].step(0, at(0), kCycle);
  ASSERT_EQ(last.ready, (Rounds{{4}}));
  EXPECT_EQ(payloadValues(last, 0, 2), data);
  for (int r : {0, 1}) {
    auto out = ranks[r].step(0, at(0), kCycle);
    ASSERT_EQ(out.ready, (Rounds{{4}})) << "rank " << r;
    EXPECT_EQ(payloadValues(out, 0, 2), data) << "rank " << r;
  }
}

TEST(LocalAgreementPayloads, NoneUnlessEveryRankPublishedDataForTheSlotThatRuns) {
  int32_t value = 5;
  {
    Ranks ranks(2);  // rank 1 gave no data
    ranks[0].hold(4, "t4", at(0), {&value, 4});
    ranks[1].hold(4, "t4", at(0));
    ranks[0].step(0, at(0), kCycle);
    auto out = ranks[1].step(0, at(0), kCycle);
    ASSERT_EQ(out.ready, (Rounds{{4}}));
    EXPECT_TRUE(out.payloads.at(0).empty());
  }
  {
    Ranks ranks(2);  // two slots held: a fused round, no payload
    for (int r = 0; r < 2; ++r) {
      ranks[r].hold(4, "t4", at(0), {&value, 4});
      ranks[r].hold(5, "t5", at(0), {&value, 4});
    }
    ranks[0].step(0, at(0), kCycle);
    auto out = ranks[1].step(0, at(0), kCycle);
    ASSERT_EQ(out.ready, (Rounds{{4, 5}}));
    EXPECT_TRUE(out.payloads.at(0).empty());
  }
  {
    Ranks ranks(2);  // each alone, but not the same slot: nothing runs
    ranks[0].hold(4, "t4", at(0), {&value, 4});
    ranks[1].hold(5, "t5", at(0), {&value, 4});
    ranks[0].step(0, at(0), kCycle);
    auto out = ranks[1].step(0, at(0), kCycle);
    EXPECT_TRUE(out.ready.empty());
    EXPECT_TRUE(out.payloads.empty());
  }
}

TEST(LocalAgreementPayloads, ARoundsPayloadsOutliveTheNextRoundResolvedInTheSameStep) {
  Ranks ranks(2);
  std::vector<int32_t> first = {7}, second = {9};
  for (int r = 0; r < 2; ++r) ranks[r].hold(1, "a", at(0), {first.data(), 4});
  ranks[0].step(0, at(0), kCycle);
  ASSERT_EQ(ranks[1].step(0, at(0), kCycle).ready, (Rounds{{1}}));
  // Rank 1 is a round ahead: rank 0's next step resolves both rounds.
  ranks[1].hold(2, "b", at(1), {second.data(), 4});
  ranks[1].step(1, at(1), kCycle);
  ranks[0].hold(2, "b", at(1), {second.data(), 4});
  auto both = ranks[0].step(1, at(1), kCycle);
  ASSERT_EQ(both.ready, (Rounds{{1}, {2}}));
  EXPECT_EQ(payloadValues(both, 0, 1), (std::vector<std::vector<int32_t>>{{7}, {7}}));
  EXPECT_EQ(payloadValues(both, 1, 1), (std::vector<std::vector<int32_t>>{{9}, {9}}));
}

TEST(LocalAgreementRounds, ASlotHeldLaterRunsInTheRoundItsHolderStarts) {
  Ranks ranks(2);
  ranks[0].hold(3, "a", at(0));
  ranks[0].step(0, at(0), kCycle);
  EXPECT_TRUE(ranks[1].step(0, at(0), kCycle).ready.empty());  // holds nothing: waits a cycle
  EXPECT_TRUE(ranks[1].step(0, at(1), kCycle).ready.empty());  // then joins with nothing
  EXPECT_TRUE(ranks[0].step(0, at(1), kCycle).ready.empty());
  // Nothing new: nobody publishes again until rank 1 holds the slot.
  EXPECT_TRUE(ranks[0].step(0, at(2), kCycle).ready.empty());
  EXPECT_FALSE(ranks[0].open());
  ranks[1].hold(3, "a", at(3));
  ranks[1].step(0, at(3), kCycle);
  EXPECT_EQ(ranks[0].step(0, at(3), kCycle).ready, (Rounds{{3}}));
  EXPECT_EQ(ranks[1].step(0, at(3), kCycle).ready, (Rounds{{3}}));
}

// A rank that holds nothing when another starts a round is usually a moment behind with the same
// tensor: it waits up to a cycle for it, so that the round agrees on it instead of on nothing.
TEST(LocalAgreementRounds, AnEmptyHandedRankJoinsAnotherRanksRoundAfterACycle) {
  Ranks ranks(2);
  ranks[0].hold(3, "a", at(0));
  ranks[0].step(0, at(0), kCycle);
  EXPECT_TRUE(ranks[1].step(0, at(0), kCycle).ready.empty());
  EXPECT_EQ(ranks.shared.latest[1], 0u) << "joined with nothing at once";
  EXPECT_EQ(ranks[1].untilDue(at(0), kCycle), kCycle);
  // Its tensor comes within the cycle: it joins with it, and the first round runs it.
  ranks[1].hold(3, "a", at(0));
  EXPECT_EQ(ranks[1].step(0, at(0), kCycle).ready, (Rounds{{3}}));
  EXPECT_EQ(ranks[0].step(0, at(0), kCycle).ready, (Rounds{{3}}));
  // Holding nothing for a whole cycle, it joins anyway: hand-overs and joins travel in rounds.
  ranks[0].hold(4, "b", at(5));
  ranks[0].step(0, at(5), kCycle);
  ranks[1].step(0, at(5), kCycle);
  EXPECT_EQ(ranks.shared.latest[1], 1u);
  ranks[1].step(0, at(6), kCycle);
  EXPECT_EQ(ranks.shared.latest[1], 2u);
}

TEST(LocalAgreementRounds, DifferentBatchCountsRunNothingUntilTheyMatch) {
  Ranks ranks(2);
  for (int r = 0; r < 2; ++r) ranks[r].hold(1, "a", at(0));
  ranks[0].step(7, at(0), kCycle);
  EXPECT_TRUE(ranks[1].step(6, at(0), kCycle).ready.empty());  // rank 1 is a batch behind
  EXPECT_TRUE(ranks[0].step(7, at(0), kCycle).ready.empty());
  EXPECT_EQ(ranks[0].held(), 1u);
  // Rank 1 applies the batch: its count moved, so it publishes again.
  ranks[1].step(7, at(1), kCycle);
  EXPECT_EQ(ranks[0].step(7, at(1), kCycle).ready, (Rounds{{1}}));
  EXPECT_EQ(ranks[1].step(7, at(1), kCycle).ready, (Rounds{{1}}));
}

TEST(LocalAgreementRounds, ALateSlotGoesToTheCoordinatorAndTheOthersFollow) {
  Ranks ranks(2);
  ranks[0].hold(4, "a", at(0));
  ranks[0].step(0, at(0), kCycle);
  ranks[1].step(0, at(0), kCycle);
  ranks[1].step(0, at(1), kCycle);  // joins with nothing, a cycle later
  ranks[0].step(0, at(1), kCycle);
  EXPECT_EQ(ranks[0].untilDue(at(3), kCycle), Millis(7));
  auto out = ranks[0].step(0, at(10), kCycle);
  EXPECT_EQ(out.handOver, (std::vector<int>{4}));
  EXPECT_EQ(ranks[0].held(), 0u);
  // Rank 1 holds it now: joining the round rank 0 started to announce the hand-over, it sees it.
  ranks[1].hold(4, "a", at(50));
  auto follow = ranks[1].step(0, at(50), kCycle);
  EXPECT_TRUE(follow.ready.empty());
  EXPECT_EQ(follow.handOver, (std::vector<int>{4}));
  ranks[0].step(0, at(50), kCycle);
  // Once rank 0's tensor completes, the slot is agreed on locally again.
  ranks[0].finished("a");
  ranks[0].hold(4, "a", at(60));
  ranks[1].finished("a");
  ranks[1].hold(4, "a", at(60));
  ranks[0].step(1, at(60), kCycle);
  ranks[1].step(1, at(60), kCycle);
  EXPECT_EQ(ranks[0].step(1, at(60), kCycle).ready, (Rounds{{4}}));
}

TEST(LocalAgreementRounds, NewSlotsWaitACycleWhileEarlierOnesAreUnanswered) {
  Ranks ranks(2);
  ranks[0].hold(1, "a", at(0));
  ranks[0].step(0, at(0), kCycle);
  ranks[1].hold(9, "z", at(0));  // another slot: rank 1 joins at once
  ranks[1].step(0, at(0), kCycle);
  ranks[0].step(0, at(0), kCycle);  // resolved: slot 1 still waits for rank 1
  uint32_t before = ranks.shared.latest[0];
  ranks[0].hold(2, "b", at(0));
  ranks[0].step(0, at(0), kCycle);
  EXPECT_EQ(ranks.shared.latest[0], before) << "published again within the cycle";
  EXPECT_EQ(ranks[0].untilDue(at(0), kCycle), kCycle);
  ranks[0].step(0, at(1), kCycle);
  EXPECT_EQ(ranks.shared.latest[0], before + 1);
}

// A rank that resolves a round, publishes the next and finds it resolved too (the others were
// quicker) returns the two rounds apart: the others fuse each round on its own, so must it.
TEST(LocalAgreementRounds, TwoRoundsResolvedInOneStepStayApart) {
  Ranks ranks(2);
  for (int r = 0; r < 2; ++r) ranks[r].hold(1, "a", at(0));
  ranks[0].step(0, at(0), kCycle);
  EXPECT_EQ(ranks[1].step(0, at(0), kCycle).ready, (Rounds{{1}}));
  ranks[1].hold(2, "b", at(1));
  ranks[1].step(0, at(1), kCycle);  // round 2, before rank 0 has looked at round 1
  ranks[0].hold(2, "b", at(1));
  EXPECT_EQ(ranks[0].step(0, at(1), kCycle).ready, (Rounds{{1}, {2}}));
  EXPECT_EQ(ranks[1].step(0, at(1), kCycle).ready, (Rounds{{2}}));
}

// A peer that never publishes (stopped, hung) fails the open round after the bound, naming it.
TEST(LocalAgreementRounds, ARoundOpenPastItsBoundFailsNamingTheSilentRanks) {
  Ranks ranks(3);
  ranks[0].hold(1, "a", at(0));
  ranks[0].step(0, at(0), kCycle);
  ranks[1].step(0, at(0), kCycle);
  ranks[1].step(0, at(1), kCycle);  // joins, with nothing, a cycle later; rank 2 never does
  EXPECT_EQ(ranks[0].untilDue(at(400), kCycle), Millis(600));
  EXPECT_NO_THROW(ranks[0].failIfStalled(at(999)));
  try {
    ranks[0].failIfStalled(at(1000));
    FAIL() << "no timeout";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("ranks [2] published no agreement round for 1000 ms"),
              std::string::npos)
        << e.what();
  }
}

// Time this rank spent running collectives is not time spent waiting for the others.
TEST(LocalAgreementRounds, ItsOwnCollectivesDoNotCountTowardsTheBound) {
  Ranks ranks(2);
  ranks[0].hold(1, "a", at(0));
  ranks[0].step(0, at(0), kCycle);
  ranks[0].paused(Millis(500));
  EXPECT_NO_THROW(ranks[0].failIfStalled(at(1400)));
  EXPECT_THROW(ranks[0].failIfStalled(at(1500)), TimeoutError);
}

TEST(LocalAgreementRounds, AnEvictedSlotIsDropped) {
  Ranks ranks(2);
  ranks[0].hold(6, "a", at(0));
  ranks[0].evicted(6);
  EXPECT_EQ(ranks[0].held(), 0u);
  ranks[0].hold(6, "b", at(1));  // the slot's new tensor
  EXPECT_EQ(ranks[0].held(), 1u);
}

// End to end: ranks as threads of one process, so they share memory.
using test::runJob;

OpRequest allreduceOf(std::vector<float>& v, const std::string& name, int processSetId = 0) {
  OpRequest r;
  r.request.kind = OpKind::Allreduce;
  r.request.name = name;
  r.request.processSetId = processSetId;
  r.tensor = {v.data(), DataType::Float32, {static_cast<int64_t>(v.size())}};
  return r;
}

OpRequest allgatherOf(std::vector<int32_t>& v, const std::string& name, int64_t rows) {
  OpRequest r;
  r.request.kind = OpKind::Allgather;
  r.request.name = name;
  r.tensor = {v.data(), DataType::Int32, {rows, 2}};
  return r;
}

void waitAll(Runtime& rt, const std::vector<std::shared_ptr<Handle>>& handles) {
  rt.waitBegin(false);
  for (const auto& h : handles) {
    ASSERT_TRUE(h->wait(Millis(30000)));
    h->rethrowIfFailed();
  }
  rt.waitEnd();
}

// Every step: a fused allreduce of three tensors and a fused allgather of two with a different
// first dimension on every rank, checked against the expected values.
void step(Runtime& rt, int rank, int n, int s) {
  std::vector<std::vector<float>> sums(3);
  std::vector<OpRequest> reqs;
  for (int t = 0; t < 3; ++t) {
    sums[t].assign(static_cast<size_t>(t + 1), static_cast<float>(rank + s + t));
    reqs.push_back(allreduceOf(sums[t], "sum" + std::to_string(t)));
  }
  std::vector<std::vector<int32_t>> parts(2);
  for (int t = 0; t < 2; ++t) {
    parts[t].assign(static_cast<size_t>(rank + 1 + t) * 2, rank * 10 + t + s);
    reqs.push_back(allgatherOf(parts[t], "gather" + std::to_string(t), rank + 1 + t));
  }
  auto handles = rt.enqueue(reqs);
  waitAll(rt, handles);
  for (int t = 0; t < 3; ++t) {
    float want = 0;
    for (int r = 0; r < n; ++r) want += static_cast<float>(r + s + t);
    for (float x : sums[t]) ASSERT_EQ(x, want) << "step " << s << " tensor " << t;
  }
  for (int t = 0; t < 2; ++t) {
    const auto& out = handles[3 + t]->output;
    const int32_t* got = static_cast<const int32_t*>(out.data());
    size_t at = 0;
    for (int r = 0; r < n; ++r) {
      for (int i = 0; i < (r + 1 + t) * 2; ++i) {
        ASSERT_EQ(got[at++], r * 10 + t + s) << "step " << s << " gather " << t << " rank " << r;
      }
    }
  }
}

// Once every tensor is cached, a step needs no message to or from rank 0: the ranks agree on the
// board. Where agreement is off, every step goes through rank 0.
void cachedStepsMessages(const std::function<void(RuntimeOptions&)>& tweak, bool expectSilence) {
  const int n = 3;
  runJob(
      n,
      [&](Runtime& rt, int rank) {
        ASSERT_EQ(rt.transportName(), "tcp+shm");
        step(rt, rank, n, 0);
        step(rt, rank, n, 1);
        uint64_t before = rt.counters().controlMessagesSent;
        for (int s = 2; s < 8; ++s) step(rt, rank, n, s);
        uint64_t sent = rt.counters().controlMessagesSent - before;
        // No rank shuts down (which sends messages) before every rank has counted.
        step(rt, rank, n, 8);
        if (expectSilence) {
          EXPECT_EQ(sent, 0u) << "rank " << rank;
        } else if (rank != 0) {
          EXPECT_GE(sent, 6u) << "rank " << rank;  // a request for every step at least
        }
      },
      [&](RuntimeOptions& o) {
        o.settings.agreementHandOverMs = 60000;  // only a message could explain any message
        tweak(o);
      });
}

TEST(LocalAgreementJob, CachedStepsSendNoControlMessage) {
  cachedStepsMessages([](RuntimeOptions&) {}, true);
}

TEST(LocalAgreementJob, OneRankTurningItOffTurnsItOffEverywhere) {
  cachedStepsMessages(
      [](RuntimeOptions& o) { o.settings.shmLocalAgreement = o.topology.rank != 1; }, false);
}

TEST(LocalAgreementJob, AutotuneTurnsItOff) {
  cachedStepsMessages([](RuntimeOptions& o) { o.settings.autotune = true; }, false);
}

// A rank that joined holds nothing, and says so on the board: the others hand their cached
// allreduce to rank 0 at once (the hand-over time is a minute here), where it runs with the joined
// rank's zeros, as without agreement.
TEST(LocalAgreementJob, AJoinedRankSendsTheOthersCachedTensorsToTheCoordinator) {
  const int n = 3;
  runJob(
      n,
      [&](Runtime& rt, int rank) {
        std::vector<float> v(4, 1.0f);
        waitAll(rt, rt.enqueue({allreduceOf(v, "x")}));
        waitAll(rt, rt.enqueue({allreduceOf(v, "x")}));  // now cached everywhere
        if (rank != 2) {
          for (int s = 0; s < 3; ++s) {
            std::vector<float> w(4, static_cast<float>(rank + 1));
            waitAll(rt, rt.enqueue({allreduceOf(w, "x")}));
            for (float x : w) EXPECT_EQ(x, 3.0f) << "rank " << rank;  // 1 + 2 + rank 2's zeros
          }
        }
        OpRequest j;
        j.request.kind = OpKind::Join;
        j.request.name = "join.noname";
        waitAll(rt, rt.enqueue({j}));
        // Once every rank has left the join, cached tensors are agreed on locally again.
        uint64_t before = rt.counters().controlMessagesSent;
        waitAll(rt, rt.enqueue({allreduceOf(v, "x")}));
        waitAll(rt, rt.enqueue({allreduceOf(v, "x")}));
        EXPECT_EQ(rt.counters().controlMessagesSent, before) << "rank " << rank;
        // No rank shuts down (which sends messages) before every rank has counted.
        waitAll(rt, rt.enqueue({allreduceOf(v, "x")}));
      },
      [](RuntimeOptions& o) { o.settings.agreementHandOverMs = 60000; });
}

// A rank that comes late: the others hand their tensors to rank 0 after the hand-over time, and
// the late rank follows as soon as it sees that; the values are right either way.
TEST(LocalAgreementJob, ALateRankMeetsTheOthersAtTheCoordinator) {
  const int n = 2;
  runJob(n, [&](Runtime& rt, int rank) {
    step(rt, rank, n, 0);
    step(rt, rank, n, 1);
    uint64_t before = rt.counters().controlMessagesSent;
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    step(rt, rank, n, 2);
    EXPECT_GE(rt.counters().controlMessagesSent - before, 1u) << "rank " << rank;
    for (int s = 3; s < 6; ++s) step(rt, rank, n, s);
  });
}

// Small cache: slots are evicted and reassigned while ranks hold them, in a different order on
// every rank.
TEST(LocalAgreementJob, EvictionsWhileHeldKeepEveryValueRight) {
  const int n = 3;
  runJob(
      n,
      [&](Runtime& rt, int rank) {
        for (int s = 0; s < 12; ++s) {
          std::vector<std::vector<float>> v(5);
          std::vector<OpRequest> reqs;
          for (int t = 0; t < 5; ++t) {
            int k = (t + rank + s) % 5;
            v[t].assign(3, static_cast<float>(rank * k + s));
            reqs.push_back(allreduceOf(v[t], "e" + std::to_string(k)));
          }
          auto handles = rt.enqueue(reqs);
          waitAll(rt, handles);
          for (int t = 0; t < 5; ++t) {
            int k = (t + rank + s) % 5;
            float want = 0;
            for (int r = 0; r < n; ++r) want += static_cast<float>(r * k + s);
            ASSERT_EQ(v[t][0], want) << "step " << s << " tensor e" << k;
          }
        }
      },
      [](RuntimeOptions& o) { o.settings.cacheCapacity = 3; });
}

// Every step mixes cached tensors (agreed on locally) with a new name (negotiated by rank 0), in
// a different order on every rank: the two kinds of decisions interleave the same way everywhere.
// A tensor the ranks run among themselves counts as used at rank 0 too: when new names fill the
// cache, rank 0 evicts the older new names, not it. Were it evicted, each rank would send its
// request again: one message more than the new name alone costs.
TEST(LocalAgreementJob, ATensorRunLocallyIsNotTheOneEvicted) {
  const int n = 2;
  runJob(
      n,
      [&](Runtime& rt, int rank) {
        std::vector<float> hot(4), cold(4);
        // Waits not marked blocked: a rank reports a marked wait to rank 0 (one message more).
        auto run = [&](const std::string& name, std::vector<float>& v) {
          auto handle = rt.enqueue({allreduceOf(v, name)}).front();
          ASSERT_TRUE(handle->wait(Millis(30000)));
          handle->rethrowIfFailed();
        };
        run("hot", hot);
        run("hot", hot);  // cached: from now on run locally
        uint64_t before = rt.counters().controlMessagesSent;
        for (int s = 0; s < 6; ++s) {
          run("hot", hot);
          run("cold" + std::to_string(s), cold);
        }
        const uint64_t withHot = rt.counters().controlMessagesSent - before;
        before = rt.counters().controlMessagesSent;
        for (int s = 6; s < 12; ++s) run("cold" + std::to_string(s), cold);
        const uint64_t coldOnly = rt.counters().controlMessagesSent - before;
        run("cold0", cold);  // no rank shuts down before every rank has counted
        if (rank != 0) {
          EXPECT_EQ(withHot, coldOnly) << "the cached tensor was renegotiated";
        }
      },
      [](RuntimeOptions& o) {
        o.settings.cacheCapacity = 3;
        o.settings.agreementHandOverMs = 60000;  // only an eviction can send it to rank 0
      });
}

TEST(LocalAgreementJob, NewTensorsBesideCachedOnesInEveryOrder) {
  const int n = 3;
  runJob(n, [&](Runtime& rt, int rank) {
    for (int s = 0; s < 40; ++s) {
      std::vector<std::vector<float>> v(4);
      std::vector<std::shared_ptr<Handle>> handles;
      for (int t = 0; t < 4; ++t) {
        int k = (t + rank + s) % 4;
        v[k].assign(static_cast<size_t>(k + 1), static_cast<float>(rank + k + s));
        std::string name = k == 3 ? "new" + std::to_string(s) : "cached" + std::to_string(k);
        handles.push_back(rt.enqueue({allreduceOf(v[k], name)}).front());
        if ((s + rank) % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
      waitAll(rt, handles);
      for (int k = 0; k < 4; ++k) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += static_cast<float>(r + k + s);
        for (float x : v[k]) ASSERT_EQ(x, want) << "step " << s << " tensor " << k;
      }
    }
  });
}

// A subset's tensors go to rank 0; the global set's beside them are agreed on locally.
TEST(LocalAgreementJob, AProcessSetBesideTheGlobalSet) {
  const int n = 3;
  runJob(
      n,
      [&](Runtime& rt, int rank) {
        for (int s = 0; s < 6; ++s) {
          std::vector<float> all(2, static_cast<float>(rank + s)),
              pair(2, static_cast<float>(rank));
          std::vector<OpRequest> reqs = {allreduceOf(all, "all")};
          if (rank != 1) reqs.push_back(allreduceOf(pair, "pair", 1));
          waitAll(rt, rt.enqueue(reqs));
          ASSERT_EQ(all[0], static_cast<float>(3 + 3 * s));
          if (rank != 1) {
            ASSERT_EQ(pair[0], 2.0f);
          }
        }
      },
      [](RuntimeOptions& o) {
        o.processSets = {{0, 2}};
      });
}

// Cached tensors crossed between two ranks that each wait: the hand-over brings them to rank 0,
// whose deadlock check fails them instead of letting the job hang.
TEST(LocalAgreementJob, CrossedCachedWaitsStillFailAsADeadlock) {
  const int n = 2;
  runJob(n, [&](Runtime& rt, int rank) {
    std::vector<float> a(1, 1.0f), b(1, 1.0f);
    waitAll(rt, rt.enqueue({allreduceOf(a, "a"), allreduceOf(b, "b")}));
    auto h = rt.enqueue({allreduceOf(rank == 0 ? a : b, rank == 0 ? "a" : "b")}).front();
    rt.waitBegin(false);
    ASSERT_TRUE(h->wait(Millis(30000)));
    rt.waitEnd();
    EXPECT_THROW(h->rethrowIfFailed(), MismatchError);
  });
}

}  // namespace
}  // namespace hora
