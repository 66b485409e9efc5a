#pragma once
// Test fixture: runs N ranks as threads of this process and waits for all of them. The first
// exception thrown by any rank is rethrown in the caller once every thread has finished (so a
// failing rank cannot leave others running against freed state).
//
//   hora::test::spawnRanks(4, [&](int rank) { ... });
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hora {
namespace test {

inline void spawnRanks(int n, const std::function<void(int rank)>& fn) {
  std::mutex mutex;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        fn(rank);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace test
}  // namespace hora
