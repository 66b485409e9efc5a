#pragma once
// Test fixture: runs N ranks as threads of this process and waits for all of them. The first
// exception thrown by any rank is rethrown in the caller once every thread has finished (so a
// failing rank cannot leave others running against freed state). When several ranks fail, each
// failure is also printed with its rank: the first to be caught is not always the cause (a rank
// that fails closes its connections, and its peers fail in turn).
//
//   hora::test::spawnRanks(4, [&](int rank) { ... });
#include <cstdio>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hora {
namespace test {

inline void spawnRanks(int n, const std::function<void(int rank)>& fn) {
  std::mutex mutex;
  std::exception_ptr first;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        fn(rank);
      } catch (...) {
        std::string what = "unknown exception";
        try {
          throw;
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {}
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) first = std::current_exception();
        failures.push_back("rank " + std::to_string(rank) + " failed: " + what);
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failures.size() > 1) {
    for (const auto& f : failures) std::fprintf(stderr, "spawnRanks: %s\n", f.c_str());
  }
  if (first) std::rethrow_exception(first);
}

}  // namespace test
}  // namespace hora
