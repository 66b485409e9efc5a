#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "core/common/logging.h"

namespace hora {
namespace {

TEST(Logging, EachThreadPrintsTheRankOfItsScope) {
  setLogLevel("info");
  setLogRank(7);
  testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 3; ++rank) {
    threads.emplace_back([rank] {
      LogRankScope scope(rank);
      HORA_LOG(Info, "line of thread " << rank);
      {
        LogRankScope inner(rank + 10);
        HORA_LOG(Info, "inner line of thread " << rank);
      }
      HORA_LOG(Info, "restored line of thread " << rank);
    });
  }
  for (auto& t : threads) t.join();
  HORA_LOG(Info, "line without a scope");
  std::string out = testing::internal::GetCapturedStderr();
  setLogRank(-1);
  setLogLevel("warning");
  for (int rank = 0; rank < 3; ++rank) {
    std::string r = std::to_string(rank);
    EXPECT_NE(out.find("INFO rank " + r + "] line of thread " + r + "\n"), std::string::npos)
        << out;
    EXPECT_NE(out.find("INFO rank " + std::to_string(rank + 10) + "] inner line of thread " + r),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("INFO rank " + r + "] restored line of thread " + r), std::string::npos)
        << out;
  }
  EXPECT_NE(out.find("INFO rank 7] line without a scope"), std::string::npos) << out;
}

}  // namespace
}  // namespace hora
