// The intake between frontends and the background thread: TensorQueue's contract
// (core/coordinator/tensor_queue.h) and the BriefMutex it is guarded by.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/common/brief_mutex.h"
#include "core/common/errors.h"
#include "core/coordinator/tensor_queue.h"
#include "tests/cpp/one_cpu.h"

namespace hora {
namespace {

std::vector<TensorEntry> group(const std::vector<std::string>& names) {
  std::vector<TensorEntry> out;
  for (const auto& name : names) {
    TensorEntry e;
    e.request.name = name;
    e.handle = std::make_shared<Handle>();
    out.push_back(std::move(e));
  }
  return out;
}

TEST(BriefMutex, ExcludesAsAMutex) {
  BriefMutex mu;
  long counter = 0;  // not atomic: only the lock keeps the increments whole
  constexpr int kEach = 200000;
  auto add = [&] {
    for (int i = 0; i < kEach; ++i) {
      std::lock_guard<BriefMutex> lock(mu);
      ++counter;
    }
  };
  std::thread other(add);
  add();
  other.join();
  EXPECT_EQ(counter, 2L * kEach);
  std::unique_lock<BriefMutex> held(mu);
  std::thread([&] { EXPECT_FALSE(mu.try_lock()); }).join();
}

// A thread bound to one CPU gets a plain mutex: a spin would wait for a holder that cannot run.
TEST(BriefMutex, SpinsOnlyWhereTheHolderCanRunMeanwhile) {
  EXPECT_FALSE(onOneCpu([] { return BriefMutex().spins(); }));
  if (usableCpus() < 2) GTEST_SKIP() << "this process may use one CPU only";
  EXPECT_TRUE(BriefMutex().spins());
}

TEST(TensorQueue, EntriesStayUntilRemovedAndKeysComeInArrivalOrder) {
  TensorQueue q;
  q.push(group({"a", "b"}));
  q.push(group({"c"}));
  EXPECT_EQ(q.takeNew(),
            (std::vector<std::string>{tensorKey(0, "a"), tensorKey(0, "b"), tensorKey(0, "c")}));
  EXPECT_TRUE(q.takeNew().empty());
  ASSERT_NE(q.find(tensorKey(0, "b")), nullptr);
  EXPECT_EQ(q.find(tensorKey(0, "b"))->request.name, "b");
  auto b = q.remove(tensorKey(0, "b"));
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->request.name, "b");
  EXPECT_EQ(q.find(tensorKey(0, "b")), nullptr);
  EXPECT_EQ(q.remove(tensorKey(0, "b")), nullptr);
  q.push(group({"b"}));  // the name is free again
  EXPECT_EQ(q.takeNew(), (std::vector<std::string>{tensorKey(0, "b")}));
}

TEST(TensorQueue, ANameInFlightIsRefusedAndTheGroupNotQueued) {
  TensorQueue q;
  q.push(group({"a"}));
  try {
    q.push(group({"z", "a"}));
    FAIL() << "a name in flight was queued again";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("same name as another tensor"), std::string::npos);
  }
  EXPECT_THROW(q.push(group({"y", "y"})), InvalidArgument);
  EXPECT_EQ(q.takeNew(), (std::vector<std::string>{tensorKey(0, "a")}));
  EXPECT_EQ(q.find(tensorKey(0, "z")), nullptr);
  EXPECT_EQ(q.find(tensorKey(0, "y")), nullptr);
}

TEST(TensorQueue, ClosedItDrainsAndRefuses) {
  TensorQueue q;
  q.push(group({"a", "b"}));
  EXPECT_EQ(q.closeAndDrain("stopped").size(), 2u);
  EXPECT_THROW(q.push(group({"c"})), ShutdownError);
}

// What the background thread is done with keeps no handle (one may hold a large result) until
// the entry itself is freed by the next push.
TEST(TensorQueue, RetiredEntriesLetGoOfTheirHandlesAtOnce) {
  TensorQueue q;
  std::weak_ptr<Handle> handle;
  {
    std::vector<TensorEntry> first = group({"a"});
    handle = first[0].handle;
    q.push(std::move(first));
  }
  q.takeNew();
  std::vector<std::unique_ptr<TensorEntry>> done;
  done.push_back(q.remove(tensorKey(0, "a")));
  done.push_back(nullptr);  // a joined rank's place: skipped
  EXPECT_FALSE(handle.expired());
  q.retire(done);
  EXPECT_TRUE(done.empty());
  EXPECT_TRUE(handle.expired());
  q.push(group({"a"}));  // frees the retired entry; the name is free again
  EXPECT_EQ(q.takeNew(), (std::vector<std::string>{tensorKey(0, "a")}));
}

// A submitting thread and the background thread at once: every entry is taken and removed
// exactly once.
TEST(TensorQueue, OneThreadPushesWhileAnotherTakesAndRemoves) {
  TensorQueue q;
  constexpr int kCount = 20000;
  std::atomic<bool> pushed{false};
  std::thread producer([&] {
    for (int i = 0; i < kCount; ++i) q.push(group({"t" + std::to_string(i)}));
    pushed = true;
  });
  int removed = 0;
  std::vector<std::string> keys;
  while (removed < kCount) {
    bool last = pushed.load();
    q.takeNew(keys);
    for (const auto& key : keys) {
      auto e = q.remove(key);
      ASSERT_NE(e, nullptr) << key;
      EXPECT_EQ(key, tensorKey(0, e->request.name));
      ++removed;
    }
    if (last && keys.empty()) break;
  }
  producer.join();
  EXPECT_EQ(removed, kCount);
  EXPECT_TRUE(q.closeAndDrain("done").empty());
}

}  // namespace
}  // namespace hora
