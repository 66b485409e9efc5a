// A thread waiting on its handle runs its cached collective itself (HORA_CALLER_DRIVES,
// core/runtime/background_loop.h): ranks as threads of this process, on one host, so over shared
// memory with local agreement. What is checked is counted (EngineCounters::callerOps), not timed.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "core/runtime.h"
#include "tests/cpp/runtime_job.h"

namespace hora {
namespace {

using test::runJob;

OpRequest sumOf(std::vector<float>& v, const std::string& name) {
  OpRequest r;
  r.request.kind = OpKind::Allreduce;
  r.request.name = name;
  r.request.reduceOp = ReduceOp::Sum;
  r.tensor.data = v.data();
  r.tensor.dtype = DataType::Float32;
  r.tensor.shape = {static_cast<int64_t>(v.size())};
  return r;
}

// callerDrives as given; a fixed spin long enough that waits are mostly spent polling (these
// ranks share the CPUs of one process).
std::function<void(RuntimeOptions&)> driving(Preference callerDrives) {
  return [callerDrives](RuntimeOptions& o) {
    o.settings.callerDrives = callerDrives;
    o.settings.spinAdaptive = false;
    o.settings.spinMicroseconds = 2000;
  };
}

// `steps` allreduces of one name (cached after the first), each checked; every `freshEvery`th
// step uses a name of its own, which only the coordinator can answer. callerWaits: enqueued as a
// blocking call (Runtime::enqueue), which does not wake the loop.
void sumLoop(Runtime& rt, int rank, int n, const std::string& name, int steps, int freshEvery,
             bool callerWaits = false) {
  for (int step = 0; step < steps; ++step) {
    std::vector<float> v(4, static_cast<float>(rank + step));
    bool fresh = freshEvery > 0 && step % freshEvery == 0;
    std::string key = fresh ? name + ".fresh" + std::to_string(step) : name;
    auto h = rt.enqueue({sumOf(v, key)}, callerWaits).front();
    ASSERT_TRUE(h->wait(Millis(20000))) << key << " step " << step;
    h->rethrowIfFailed();
    float want = static_cast<float>(n * (n - 1) / 2 + n * step);
    for (float x : v) ASSERT_EQ(x, want) << key << " step " << step;
  }
}

// Which thread of a rank wins the loop for a step is up to the scheduler (here four threads
// share the CPUs, and in some jobs the background thread wins every step): over a few jobs,
// waiting threads must have run some.
TEST(CallerDrives, WaitingThreadRunsCachedAllreduce) {
  const int n = 2;
  std::atomic<uint64_t> callerOps{0};
  for (int job = 0; job < 5 && callerOps.load() == 0; ++job) {
    runJob(
        n,
        [&](Runtime& rt, int rank) {
          sumLoop(rt, rank, n, "cached", 500, 0, /*callerWaits=*/true);
          callerOps += rt.counters().callerOps;
        },
        driving(Preference::On));
  }
  EXPECT_GT(callerOps.load(), 0u);
}

// A rank alone agrees with itself (core/transport/solo_board.h): a waiting thread runs every
// cached collective, and the background thread is never needed for one.
TEST(CallerDrives, ARankAloneRunsItsCachedCollectivesItself) {
  runJob(
      1,
      [&](Runtime& rt, int rank) {
        sumLoop(rt, rank, 1, "cached", 200, 0, /*callerWaits=*/true);
        // Most of them: the first is negotiated, and the loop, which wakes every park slice
        // (1 ms) while a caller polls, takes a tensor whose caller was preempted between its
        // enqueue and its first poll (12 of 200 under ThreadSanitizer on a busy machine). With
        // waiting threads not driving, it would be none.
        EXPECT_GE(rt.counters().callerOps, 100u);
        EXPECT_EQ(rt.counters().controlMessagesSent, 0u);
      },
      [](RuntimeOptions& o) {
        driving(Preference::Auto)(o);
        // The loop's own ticks find a queued tensor now and then before its caller polls; a
        // long cycle keeps them out of the count.
        o.settings.cycleTimeMs = 500;
      });
}

TEST(CallerDrives, OffLeavesEveryCollectiveToTheLoop) {
  const int n = 2;
  runJob(
      n,
      [&](Runtime& rt, int rank) {
        sumLoop(rt, rank, n, "cached", 200, 0);
        EXPECT_EQ(rt.counters().callerOps, 0u) << "rank " << rank;
      },
      driving(Preference::Off));
}

// Several waiting threads per rank race each other and the background thread for the loop, with
// cached tensors and, now and then, one that must go to the coordinator.
TEST(CallerDrives, ThreeRanksTwoWaitersEachRaceTheLoop) {
  const int n = 3;
  runJob(
      n,
      [&](Runtime& rt, int rank) {
        std::vector<std::thread> waiters;
        for (int t = 0; t < 2; ++t) {
          // One waiter enqueues as a blocking call, which leaves the loop asleep.
          waiters.emplace_back(
              [&, t] { sumLoop(rt, rank, n, "w" + std::to_string(t), 150, 25, t == 0); });
        }
        for (auto& w : waiters) w.join();
      },
      driving(Preference::On));
}

}  // namespace
}  // namespace hora
