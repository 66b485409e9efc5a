// Bounded polling before blocking: spinUntil and Handle::wait.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <unistd.h>

#include "core/common/spin.h"
#include "core/coordinator/handle.h"
#include "tests/cpp/one_cpu.h"

namespace hora {
namespace {

using namespace std::chrono_literals;

TEST(SpinUntil, ReadyAtOnceOrWithinTheBudget) {
  int calls = 0;
  EXPECT_TRUE(spinUntil(Micros(0), [&] { return ++calls > 0; }));
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(spinUntil(Micros(0), [] { return false; }));

  std::atomic<bool> flag{false};
  std::thread setter([&] {
    std::this_thread::sleep_for(2ms);
    flag = true;
  });
  EXPECT_TRUE(spinUntil(Micros(5000000), [&] { return flag.load(); }));
  setter.join();
}

TEST(SpinUntil, GivesUpWhenTheBudgetIsSpent) {
  auto start = Clock::now();
  EXPECT_FALSE(spinUntil(Micros(20000), [] { return false; }));
  auto took = Clock::now() - start;
  EXPECT_GE(took, 20ms);
  EXPECT_LT(took, 2000ms);  // generous: the box may be busy
}

TEST(BoundToOneCpu, TrueOnlyForAThreadThatMayUseOneCpu) {
  EXPECT_TRUE(onOneCpu([] { return boundToOneCpu(); }));
  if (usableCpus() < 2) GTEST_SKIP() << "this process may use one CPU only";
  EXPECT_FALSE(boundToOneCpu());
}

TEST(CallerDrivesByDefault, UpToTwoRanksPerCpuOnline) {
  const int online = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  ASSERT_GT(online, 0);
  EXPECT_TRUE(callerDrivesByDefault(1));
  EXPECT_TRUE(callerDrivesByDefault(online));
  EXPECT_TRUE(callerDrivesByDefault(2 * online));
  EXPECT_FALSE(callerDrivesByDefault(2 * online + 1));
}

TEST(HandleWait, CompletionDuringOrAfterTheSpin) {
  for (auto delay : {0ms, 1ms, 30ms}) {  // within the budget, and after it (blocked on the cv)
    Handle h(Micros(5000));
    std::thread completer([&] {
      std::this_thread::sleep_for(delay);
      h.complete(nullptr);
    });
    EXPECT_TRUE(h.wait(std::nullopt));
    EXPECT_TRUE(h.poll());
    completer.join();
  }
}

// poll() reads the completion without the handle's lock: pending until complete(), failed or not,
// and the results written before complete() are there when it says done.
TEST(HandleWait, PollSaysPendingUntilCompleted) {
  for (bool fails : {false, true}) {
    Handle h;
    EXPECT_FALSE(h.poll());
    std::thread completer([&] {
      h.lastJoinedRank = 3;
      h.complete(fails ? std::make_exception_ptr(std::runtime_error("failed")) : nullptr);
    });
    while (!h.poll()) std::this_thread::yield();
    EXPECT_EQ(h.lastJoinedRank, 3);
    EXPECT_EQ(h.error() != nullptr, fails);
    completer.join();
  }
}

TEST(HandleWait, TimeoutShorterThanTheSpin) {
  Handle h(Micros(10000000));
  auto start = Clock::now();
  EXPECT_FALSE(h.wait(Millis(20)));
  auto took = Clock::now() - start;
  EXPECT_GE(took, 20ms);
  EXPECT_LT(took, 2000ms);
  h.complete(std::make_exception_ptr(std::runtime_error("failed")));
  EXPECT_TRUE(h.wait(Millis(0)));
  EXPECT_THROW(h.rethrowIfFailed(), std::runtime_error);
}

}  // namespace
}  // namespace hora
