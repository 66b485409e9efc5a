// Timeline and stall inspector, through the runtime.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <type_traits>

#include "core/common/errors.h"
#include "core/runtime.h"
#include "core/store/tcp_store.h"
#include "core/timeline/timeline.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void runJob(int n, const std::function<void(Runtime&, int)>& body,
            const std::function<void(RuntimeOptions&)>& tweak) {
  TcpStoreServer server("127.0.0.1", 0, "s");
  test::spawnRanks(n, [&](int rank) {
    RuntimeOptions o;
    o.topology.rank = rank;
    o.topology.size = n;
    o.storeHost = "127.0.0.1";
    o.storePort = server.port();
    o.secret = "s";
    o.listenHost = "127.0.0.1";
    tweak(o);
    auto rt = Runtime::start(o);
    body(*rt, rank);
    rt->shutdown();
  });
}

OpRequest allreduceOf(std::vector<float>& v, const std::string& name) {
  OpRequest r;
  r.request.kind = OpKind::Allreduce;
  r.request.name = name;
  r.tensor = {v.data(), DataType::Float32, {static_cast<int64_t>(v.size())}};
  r.request.callSite = "train.py:7";
  return r;
}

TEST(Timeline, RecordsNegotiationAndActivitiesAndStaysValid) {
  std::string path = "/tmp/hora_timeline_test_" + std::to_string(getpid()) + ".json";
  runJob(
      2,
      [&](Runtime& rt, int) {
        for (int step = 0; step < 3; ++step) {
          std::vector<float> a(8, 1.0f), b(8, 2.0f);
          auto hs = rt.enqueue({allreduceOf(a, "grad.a"), allreduceOf(b, "grad.b")});
          for (auto& h : hs) {
            ASSERT_TRUE(h->wait(Millis(10000)));
            h->rethrowIfFailed();
          }
        }
      },
      [&](RuntimeOptions& o) { o.settings.timeline = path; });
  std::string t = readFile(path);
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(t.front(), '[');
  EXPECT_EQ(t.back(), ']');
  // The ranks are threads of one process: their collectives run over shared memory.
  for (const char* want : {"start_time_since_epoch_in_micros", "\"grad.a\"", "NEGOTIATE_ALLREDUCE",
                           "\"name\":\"0\"", "\"name\":\"1\"", "SHM_ALLREDUCE",
                           "\"dtype\":\"float32\"", "\"shape\":\"[8]\"", "\"STEP\""}) {
    EXPECT_NE(t.find(want), std::string::npos) << want;
  }
  ::unlink(path.c_str());
}

// Per trace row (pid), how many begins ("B") stay open at the end; -1 when an end ("E") came
// with no begin open before it.
std::map<int, int> openSpansPerRow(const std::string& trace) {
  std::map<int, int> open;
  std::regex record(R"re(\{"ph":"([BE])"[^\n]*"pid":([0-9]+))re");
  for (std::sregex_iterator it(trace.begin(), trace.end(), record), end; it != end; ++it) {
    int pid = std::stoi((*it)[2]);
    if ((*it)[1] == "B") {
      ++open[pid];
    } else if (open[pid]-- == 0) {
      open[pid] = -1;
      break;
    }
  }
  return open;
}

TEST(Timeline, RecordsAnEndOnlyAgainstARecordedBegin) {
  std::string path = "/tmp/hora_timeline_spans_" + std::to_string(getpid()) + ".json";
  Timeline timeline;
  TimelineOptions options;
  options.path = path;
  options.sampleEvery = 2;
  timeline.start(options);
  // Negotiation that began before the timeline did: its end has no begin.
  timeline.negotiateEnd(0, "early");
  // Step 0 (recorded) begins "step" and an op of "long"; step 1 (left out) ends that op and
  // runs another whole op of "long"; step 2 (recorded) runs it again.
  timeline.negotiateStart(0, "step", "ALLREDUCE");
  timeline.negotiateEnd(0, "step");
  timeline.opStart(0, "long", "ALLREDUCE");
  timeline.activityStart(0, "long", "QUEUE");
  timeline.negotiateStart(0, "step", "ALLREDUCE");  // step 1
  timeline.activityEnd(0, "long");
  timeline.opEnd(0, "long", "float32", "[1]");
  timeline.opStart(0, "long", "ALLREDUCE");
  timeline.opEnd(0, "long", "float32", "[1]");
  timeline.negotiateStart(0, "step", "ALLREDUCE");  // step 2
  timeline.negotiateEnd(0, "step");
  timeline.opStart(0, "long", "ALLREDUCE");
  timeline.opEnd(0, "long", "float32", "[1]");
  timeline.stop();
  std::string trace = readFile(path);
  EXPECT_EQ(trace.find("\"early\""), std::string::npos) << trace;
  std::map<int, int> open = openSpansPerRow(trace);
  ASSERT_EQ(open.size(), 2u) << trace;  // "step" and "long"
  for (const auto& [pid, count] : open) EXPECT_EQ(count, 0) << "row " << pid << "\n" << trace;
  // The op begun in step 0 is closed in step 1: two op begins and two op ends with the shape.
  size_t ends = 0;
  for (size_t at = trace.find("\"shape\""); at != std::string::npos;
       at = trace.find("\"shape\"", at + 1)) {
    ++ends;
  }
  EXPECT_EQ(ends, 2u) << trace;
  ::unlink(path.c_str());
}

TEST(Timeline, SizeCapStopsRecordingCleanly) {
  std::string path = "/tmp/hora_timeline_cap_" + std::to_string(getpid()) + ".json";
  runJob(
      1,
      [&](Runtime& rt, int) {
        rt.startTimeline(path, true);
        for (int i = 0; i < 2000; ++i) {
          std::vector<float> a(1);
          auto h = rt.enqueue({allreduceOf(a, "t" + std::to_string(i % 50))}).front();
          ASSERT_TRUE(h->wait(Millis(10000)));
        }
        rt.stopTimeline();
      },
      [&](RuntimeOptions& o) { o.settings.timelineMaxMb = 0; });
  std::string uncapped = readFile(path);
  runJob(
      1,
      [&](Runtime& rt, int) {
        rt.startTimeline(path, false);
        for (int i = 0; i < 8000; ++i) {
          std::vector<float> a(1);
          auto h = rt.enqueue({allreduceOf(a, "t" + std::to_string(i % 50))}).front();
          ASSERT_TRUE(h->wait(Millis(10000)));
        }
      },
      [&](RuntimeOptions& o) { o.settings.timelineMaxMb = 1; });
  std::string capped = readFile(path);
  EXPECT_NE(uncapped.find("CYCLE_START"), std::string::npos);
  EXPECT_LE(capped.size(), (1u << 20) + 512);
  EXPECT_NE(capped.find("TIMELINE_TRUNCATED"), std::string::npos);
  EXPECT_EQ(capped.back(), ']');
  ::unlink(path.c_str());
}

TEST(StallInspector, ReportsMissingRankAndCallSiteThenShutsDown) {
  runJob(
      2,
      [&](Runtime& rt, int rank) {
        if (rank == 1) {
          // Never submits "x"; waits for the job to be shut down by the stall inspector.
          std::vector<float> y(1);
          auto h = rt.enqueue({allreduceOf(y, "only.rank1")}).front();
          ASSERT_TRUE(h->wait(Millis(10000)));
          return;
        }
        std::vector<float> x(1);
        auto h = rt.enqueue({allreduceOf(x, "x")}).front();
        ASSERT_TRUE(h->wait(Millis(10000))) << "the stall must end the job";
        try {
          h->rethrowIfFailed();
          FAIL() << "expected the stall to fail the op";
        } catch (const ShutdownError& e) {
          std::string m = e.what();
          EXPECT_NE(m.find("Missing ranks"), std::string::npos) << m;
          EXPECT_NE(m.find("1: [x]"), std::string::npos) << m;
          EXPECT_NE(m.find("train.py:7"), std::string::npos) << m;
        }
      },
      [](RuntimeOptions& o) {
        o.settings.stallCheckTimeSeconds = 0.3;
        o.settings.stallShutdownTimeSeconds = 0.8;
      });
}

}  // namespace
}  // namespace hora

namespace hora {
namespace {

TEST(Autotune, TriesCandidatesLogsScoresAndKeepsResultsCorrect) {
  std::string log = "/tmp/hora_autotune_" + std::to_string(getpid()) + ".csv";
  // What settings() reports after each step, per rank.
  std::vector<std::vector<std::pair<int64_t, double>>> tuned(2);
  runJob(
      2,
      [&](Runtime& rt, int rank) {
        static_assert(std::is_same<decltype(rt.settings()), Settings>::value,
                      "settings() hands out a snapshot, not the loop's state");
        for (int step = 0; step < 80; ++step) {
          std::vector<std::vector<float>> g(
              4, std::vector<float>(64, static_cast<float>(rank + step)));
          std::vector<OpRequest> reqs;
          for (int t = 0; t < 4; ++t) reqs.push_back(allreduceOf(g[t], "g" + std::to_string(t)));
          for (auto& h : rt.enqueue(reqs)) {
            ASSERT_TRUE(h->wait(Millis(10000)));
            h->rethrowIfFailed();
          }
          for (int t = 0; t < 4; ++t) ASSERT_EQ(g[t][0], static_cast<float>(2 * step + 1));
          Settings now = rt.settings();
          EXPECT_TRUE(now.autotune);
          tuned[rank].emplace_back(now.fusionThreshold, now.cycleTimeMs);
        }
      },
      [&](RuntimeOptions& o) {
        o.settings.autotune = true;
        o.settings.autotuneLog = log;
        o.settings.autotuneWarmupSamples = 1;
        o.settings.autotuneStepsPerSample = 2;
        o.settings.autotuneSamplesPerCandidate = 1;
      });
  std::string csv = readFile(log);
  EXPECT_EQ(csv.rfind("cycle_time_ms,tensor_fusion_threshold,score\n", 0), 0u) << csv;
  int lines = 0;
  for (char c : csv) lines += c == '\n';
  EXPECT_GE(lines, 1 + 8 + 5) << "every threshold and cycle-time candidate is scored:\n" << csv;
  EXPECT_NE(csv.find(",0,"), std::string::npos) << "fusion off is a candidate";
  EXPECT_NE(csv.find(",134217728,"), std::string::npos);
  // Rank 1 takes the tuned values from rank 0's response batches, so both ranks pass through the
  // tuner's sequence: the defaults, each candidate in the order the log scores them, then the
  // one kept. A rank's thread reads its snapshot after a step, when its loop may already have
  // moved on, so either rank may miss a value (rank 0 most often the defaults); neither may see
  // one out of order or one the tuner never set, and both end with the same.
  auto changes = [](const std::vector<std::pair<int64_t, double>>& seq) {
    std::vector<std::pair<int64_t, double>> out;
    for (const auto& v : seq) {
      if (out.empty() || out.back() != v) out.push_back(v);
    }
    return out;
  };
  ASSERT_EQ(tuned[0].back(), tuned[1].back());
  std::vector<std::pair<int64_t, double>> order{
      {Settings().fusionThreshold, Settings().cycleTimeMs}};
  std::istringstream rows(csv.substr(csv.find('\n') + 1));
  std::string row;
  while (std::getline(rows, row)) {
    double cycle = 0;
    long long threshold = 0;
    if (std::sscanf(row.c_str(), "%lf,%lld,", &cycle, &threshold) == 2) {
      order.emplace_back(threshold, cycle);
    }
  }
  order.push_back(tuned[0].back());
  for (int rank = 0; rank < 2; ++rank) {
    size_t at = 0;
    for (const auto& v : changes(tuned[rank])) {
      while (at < order.size() && order[at] != v) ++at;
      ASSERT_LT(at, order.size()) << "rank " << rank << " saw (" << v.first << ", " << v.second
                                  << ") out of the tuner's order";
      ++at;
    }
  }
  // The tuner visibly moved (fusion off is one of its candidates).
  bool visitedFusionOff = false;
  for (const auto& v : tuned[1]) visitedFusionOff = visitedFusionOff || v.first == 0;
  EXPECT_TRUE(visitedFusionOff);
  ::unlink(log.c_str());
}

}  // namespace
}  // namespace hora
