// End to end through the engine: N ranks as threads, each with its own Runtime, over the TCP
// transport and a TCP rendezvous store served in this process.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <thread>

#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/runtime.h"
#include "core/store/tcp_store.h"
#include "tests/cpp/runtime_job.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

constexpr char kSecret[] = "runtime-test-secret";

using test::runJob;

OpRequest allreduceOf(std::vector<float>& v, const std::string& name, ReduceOp op = ReduceOp::Sum) {
  OpRequest r;
  r.request.kind = OpKind::Allreduce;
  r.request.name = name;
  r.request.reduceOp = op;
  r.tensor.data = v.data();
  r.tensor.dtype = DataType::Float32;
  r.tensor.shape = {static_cast<int64_t>(v.size())};
  return r;
}

void waitOk(const std::shared_ptr<Handle>& h) {
  ASSERT_TRUE(h->wait(Millis(20000)));
  h->rethrowIfFailed();
}

TEST(Runtime, FusedAllreduceOverSeveralSteps) {
  const int n = 3;
  runJob(
      n,
      [&](Runtime& rt, int rank) {
        for (int step = 0; step < 4; ++step) {
          std::vector<std::vector<float>> data;
          for (int t = 0; t < 30; ++t) {
            data.emplace_back(static_cast<size_t>(t * 7 + 1));
            for (size_t i = 0; i < data.back().size(); ++i) data.back()[i] = rank + t + step + i;
          }
          std::vector<OpRequest> reqs;
          for (int t = 0; t < 30; ++t)
            reqs.push_back(allreduceOf(data[t], "g" + std::to_string(t)));
          auto handles = rt.enqueue(reqs);
          for (auto& h : handles) waitOk(h);
          for (int t = 0; t < 30; ++t) {
            for (size_t i = 0; i < data[t].size(); ++i) {
              float want = 0 + 1 + 2 + n * static_cast<float>(t + step + i);
              ASSERT_EQ(data[t][i], want) << "step " << step << " tensor " << t << " i " << i;
            }
          }
        }
      },
      [](RuntimeOptions& o) { o.settings.fusionThreshold = 256; });
}

// With fewer cache slots than tensors per step, one response batch can answer a tensor from its
// slot and evict that slot for another: the ranks must rebuild the hit (sent as its slot alone)
// from their cache as it was before the batch. Through rank 0 (no local agreement).
TEST(Runtime, ACacheSmallerThanAStepRebuildsHitsBeforeItsEvictions) {
  const int n = 3, tensors = 10;
  runJob(
      n,
      [&](Runtime& rt, int rank) {
        for (int step = 0; step < 12; ++step) {
          std::vector<std::vector<float>> data;
          std::vector<OpRequest> reqs;
          for (int t = 0; t < tensors; ++t) data.emplace_back(static_cast<size_t>(t + 1), rank + t);
          for (int t = 0; t < tensors; ++t) {
            reqs.push_back(allreduceOf(data[t], "c" + std::to_string(t)));
          }
          for (auto& h : rt.enqueue(reqs)) waitOk(h);
          for (int t = 0; t < tensors; ++t) {
            ASSERT_EQ(data[t].back(), 0 + 1 + 2 + n * t) << "step " << step << " tensor " << t;
          }
        }
      },
      [](RuntimeOptions& o) {
        o.settings.cacheCapacity = 4;
        o.settings.fusionThreshold = 0;  // one response per tensor
        o.settings.shmLocalAgreement = false;
      });
}

// A barrier releases no rank before every rank entered it. Each rank marks its entry just before
// submitting the barrier; the late rank of each round waits first, so a rank let through early
// would find its mark missing. Only the order is asserted.
TEST(Runtime, BarrierReleasesNoRankBeforeEveryRankEntered) {
  const int n = 3;
  std::atomic<bool> entered[n][n] = {};
  runJob(n, [&](Runtime& rt, int rank) {
    for (int late = 0; late < n; ++late) {
      if (rank == late) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      entered[late][rank] = true;
      OpRequest r;
      r.request.kind = OpKind::Barrier;
      r.request.name = "barrier.noname";
      auto handles = rt.enqueue({r});
      ASSERT_EQ(handles.size(), 1u);
      waitOk(handles[0]);
      for (int q = 0; q < n; ++q) {
        EXPECT_TRUE(entered[late][q]) << "rank " << rank << " left round " << late
                                      << "'s barrier before rank " << q << " entered it";
      }
    }
  });
}

// Fused results equal one-by-one results to the bit, for float sums on 3 ranks, whatever the
// sizes (tensors below and above the algorithms' switch-over size).
TEST(Runtime, FusionIsBitIdenticalToOneByOne) {
  const int n = 3;
  const std::vector<size_t> sizes = {1, 7, 1000, 70000, 3};
  auto fill = [](std::vector<float>& v, int rank, size_t t) {
    uint32_t x = 2654435761u * static_cast<uint32_t>(rank * 131 + t * 7 + 1);
    for (auto& e : v) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      e = static_cast<float>(x % 100000) / 977.0f - 37.3f;
    }
  };
  std::vector<std::vector<std::vector<float>>> fused(n), alone(n);
  for (int pass = 0; pass < 2; ++pass) {
    auto& out = pass == 0 ? fused : alone;
    runJob(
        n,
        [&](Runtime& rt, int rank) {
          std::vector<std::vector<float>> data;
          for (size_t t = 0; t < sizes.size(); ++t) {
            data.emplace_back(sizes[t]);
            fill(data.back(), rank, t);
          }
          std::vector<OpRequest> reqs;
          for (size_t t = 0; t < sizes.size(); ++t)
            reqs.push_back(allreduceOf(data[t], "t" + std::to_string(t)));
          if (pass == 0) {
            for (auto& h : rt.enqueue(reqs)) waitOk(h);  // one group: fused
          } else {
            for (auto& r : reqs) waitOk(rt.enqueue({r}).front());  // one at a time
          }
          out[rank] = data;
        },
        [&](RuntimeOptions& o) { o.settings.fusionThreshold = pass == 0 ? (64 << 20) : 0; });
  }
  for (int rank = 0; rank < n; ++rank) {
    for (size_t t = 0; t < sizes.size(); ++t) {
      ASSERT_EQ(std::memcmp(fused[rank][t].data(), alone[rank][t].data(), sizes[t] * 4), 0)
          << "rank " << rank << " tensor " << t;
      ASSERT_EQ(std::memcmp(fused[rank][t].data(), fused[0][t].data(), sizes[t] * 4), 0)
          << "every rank holds the same bits";
    }
  }
}

TEST(Runtime, AverageAndScales) {
  runJob(2, [&](Runtime& rt, int rank) {
    std::vector<float> v(5, static_cast<float>(rank + 1));
    OpRequest r = allreduceOf(v, "avg", ReduceOp::Average);
    r.request.prescale = 2.0;
    r.request.postscale = 0.5;
    waitOk(rt.enqueue({r}).front());
    for (float x : v) EXPECT_FLOAT_EQ(x, 1.5f);  // ((1*2 + 2*2) / 2) * 0.5
  });
}

TEST(Runtime, AllgatherWithUnevenFirstDimension) {
  const int n = 3;
  runJob(n, [&](Runtime& rt, int rank) {
    std::vector<int32_t> mine(static_cast<size_t>(rank + 1) * 2, rank);
    OpRequest r;
    r.request.kind = OpKind::Allgather;
    r.request.name = "ag";
    r.tensor = {mine.data(), DataType::Int32, {rank + 1, 2}};
    auto h = rt.enqueue({r}).front();
    waitOk(h);
    ASSERT_EQ(h->output.shape, (std::vector<int64_t>{6, 2}));
    const int32_t* out = static_cast<const int32_t*>(h->output.data());
    std::vector<int32_t> want = {0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
    EXPECT_TRUE(std::equal(want.begin(), want.end(), out));
  });
}

TEST(Runtime, MismatchRaisesOnEveryRankAndTheNextOpWorks) {
  const int n = 3;
  runJob(n, [&](Runtime& rt, int rank) {
    std::vector<float> v(rank == 2 ? 4 : 3, 1.0f);
    auto h = rt.enqueue({allreduceOf(v, "bad")}).front();
    ASSERT_TRUE(h->wait(Millis(20000)));
    try {
      h->rethrowIfFailed();
      FAIL() << "expected a mismatch";
    } catch (const MismatchError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("rank 2: [4]"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 0: [3]"), std::string::npos) << m;
    }
    std::vector<float> w(3, 1.0f);
    waitOk(rt.enqueue({allreduceOf(w, "good")}).front());
    EXPECT_EQ(w[0], 3.0f);
  });
}

TEST(Runtime, DuplicateInFlightNameIsRejectedAtOnce) {
  runJob(1, [&](Runtime& rt, int) {
    std::vector<float> a(2), b(2);
    EXPECT_THROW(rt.enqueue({allreduceOf(a, "x"), allreduceOf(b, "x")}), InvalidArgument);
  });
}

TEST(Runtime, JoinLetsOthersFinishAndReturnsLastRank) {
  const int n = 3;
  runJob(n, [&](Runtime& rt, int rank) {
    if (rank == 0) {
      std::vector<float> v(4, 5.0f);
      auto avg = allreduceOf(v, "late", ReduceOp::Average);
      waitOk(rt.enqueue({avg}).front());
      for (float x : v) EXPECT_FLOAT_EQ(x, 5.0f / 3);  // joined ranks add zeros
    }
    OpRequest j;
    j.request.kind = OpKind::Join;
    j.request.name = "join.noname";
    auto h = rt.enqueue({j}).front();
    waitOk(h);
    EXPECT_EQ(h->lastJoinedRank, 0);
  });
}

TEST(Runtime, StaticProcessSetRunsOnItsMembersOnly) {
  const int n = 3;
  runJob(
      n,
      [&](Runtime& rt, int rank) {
        EXPECT_EQ(rt.processSetRanks(1), (std::vector<int>{0, 2}));
        std::vector<float> v(2, static_cast<float>(rank));
        OpRequest r = allreduceOf(v, "x");
        r.request.processSetId = 1;
        if (rank == 1) {
          EXPECT_THROW(rt.enqueue({r}), InvalidArgument);
        } else {
          waitOk(rt.enqueue({r}).front());
          EXPECT_EQ(v[0], 2.0f);
        }
        std::vector<float> done(1);
        waitOk(rt.enqueue({allreduceOf(done, "done")}).front());  // nobody shuts down early
      },
      [](RuntimeOptions& o) {
        o.processSets = {{0, 2}};
      });
}

TEST(Runtime, ShutdownOnOneRankFailsPendingWorkElsewhere) {
  const int n = 3;
  runJob(n, [&](Runtime& rt, int rank) {
    if (rank == 2) {
      rt.shutdown();
      return;
    }
    std::vector<float> v(2);
    std::shared_ptr<Handle> h;
    try {
      h = rt.enqueue({allreduceOf(v, "never")}).front();
    } catch (const ShutdownError&) {
      return;  // the shutdown arrived first: enqueue refuses at once
    }
    ASSERT_TRUE(h->wait(Millis(15000))) << "pending work must fail, not hang";
    EXPECT_THROW(h->rethrowIfFailed(), ShutdownError);
  });
}

// Ranks as threads: every runtime's lines carry its own rank, not the last one started.
TEST(Runtime, EachRuntimeLogsWithItsOwnRank) {
  const int n = 3;
  testing::internal::CaptureStderr();
  runJob(
      n,
      [&](Runtime& rt, int) {
        std::vector<float> v(2, 1.0f);
        waitOk(rt.enqueue({allreduceOf(v, "x")}).front());
      },
      [](RuntimeOptions& o) { o.settings.logLevel = "debug"; });
  std::string out = testing::internal::GetCapturedStderr();
  setLogLevel("warning");
  setLogRank(-1);
  for (int rank = 0; rank < n; ++rank) {
    std::string line = "DEBUG rank " + std::to_string(rank) + "] background loop started";
    size_t first = out.find(line);
    EXPECT_NE(first, std::string::npos) << out;
    EXPECT_EQ(out.find(line, first + 1), std::string::npos) << "twice: " << line;
  }
}

TEST(Runtime, ReinitAfterShutdown) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  test::spawnRanks(2, [&](int rank) {
    for (int gen = 0; gen < 3; ++gen) {
      RuntimeOptions o;
      o.topology.rank = rank;
      o.topology.size = 2;
      o.storeHost = "127.0.0.1";
      o.storePort = server.port();
      o.secret = kSecret;
      o.listenHost = "127.0.0.1";
      o.generation = gen;
      auto rt = Runtime::start(o);
      std::vector<float> v(1, 1.0f);
      waitOk(rt->enqueue({allreduceOf(v, "x")}).front());
      EXPECT_EQ(v[0], 2.0f);
      rt->shutdown();
    }
  });
}

}  // namespace
}  // namespace hora
