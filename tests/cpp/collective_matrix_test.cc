// Every collective of every transport that can run its ranks as threads, against the shared
// checks of collective_checks.h: transport x ranks (1, 2, 3, 4, 7; shm up to 4) x count x dtype x
// op, one named test per case, e.g. Tcp/Allreduce.MatchesReference/np3_count1003_float32_Sum.
//
// A transport joins the matrix with one HORA_COLLECTIVE_MATRIX line at the end of this file. Ranks
// stay connected from one case to the next (connecting is the slow part); a case that throws drops
// its connections, and the next case connects afresh.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "core/store/memory_store.h"
#include "core/transport/transport.h"
#include "tests/cpp/collective_checks.h"
#include "tests/cpp/connect_options.h"

namespace hora {
namespace test {
namespace {

using namespace std::chrono_literals;

struct TransportUnderTest {
  const char* registryName;  // makeTransport(registryName)
  bool rankOrderedFloats;    // reduces floating Sum/Product in rank order (see CheckContext)
  int maxRanks;              // the largest group size of kRanks to run
  size_t shmWindowBytes;     // ConnectOptions::shmWindowBytes
  const char* label;         // names the transport's connections apart from another variant's
};

const TransportUnderTest kTcp{"tcp", true, 7, 0, "tcp"};
// Shared memory runs the same Links algorithms as TCP (checked up to 7 ranks there); 1-4 ranks
// cover its own paths (shared payloads, rings, leaving ranks) at less CI time.
const TransportUnderTest kShm{"shm", true, 4, 0, "shm"};
// With windows, allreduces above a shared payload and broadcasts from 512 KiB run in them
// (window_allreduce.h, window_gather.h); windows of 4 KiB split the larger cases into parts (up
// to a few hundred).
const TransportUnderTest kShmWindow{"shm", true, 4, 4096, "shm-window"};

const int kRanks[] = {1, 2, 3, 4, 7};

struct MatrixParam {
  TransportUnderTest transport;
  Case c;
};

void PrintTo(const MatrixParam& p, std::ostream* os) {
  *os << p.transport.label << " " << fullCaseName(p.c);
}

// N connected ranks of one transport, kept for the cases that follow.
struct RankGroup {
  MemoryStore store;
  std::vector<Connection> connections;
};

std::map<std::string, std::unique_ptr<RankGroup>>& groups() {
  static std::map<std::string, std::unique_ptr<RankGroup>> g;
  return g;
}

std::unique_ptr<RankGroup> connectGroup(const TransportUnderTest& t, int n) {
  auto group = std::make_unique<RankGroup>();
  group->connections.resize(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      ConnectOptions o = test::loopbackOptions(rank, n, "collective-matrix", 20000ms);
      o.shmWindowBytes = t.shmWindowBytes;
      try {
        Connection c = makeTransport(t.registryName)->connect(o, group->store);
        if (c.world->rank() != rank || c.world->size() != n) {
          errors[rank] = "connected as rank " + std::to_string(c.world->rank()) + " of " +
                         std::to_string(c.world->size());
        } else if (c.world->backendName() != makeTransport(t.registryName)->name()) {
          errors[rank] = "backend name " + c.world->backendName();
        }
        group->connections[rank] = std::move(c);
      } catch (const std::exception& e) {
        errors[rank] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int rank = 0; rank < n; ++rank) {
    if (!errors[rank].empty()) {
      ADD_FAILURE() << "connecting rank " << rank << " of " << n << ": " << errors[rank];
      return nullptr;
    }
  }
  return group;
}

void runMatrixCase(const MatrixParam& p) {
  const int n = p.c.ranks;
  const std::string key = std::string(p.transport.label) + "/" + std::to_string(n);
  auto& slot = groups()[key];
  if (!slot) slot = connectGroup(p.transport, n);
  ASSERT_NE(slot, nullptr);
  RankGroup& group = *slot;
  static std::atomic<int> runs{0};
  CheckContext context;
  context.rankOrderedFloats = p.transport.rankOrderedFloats;
  context.store = &group.store;
  context.storePrefix = "case" + std::to_string(runs++);
  std::vector<std::string> failures(n);
  std::atomic<bool> threw{false};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < n; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        failures[rank] = runCase(*group.connections[rank].world, p.c, context);
      } catch (const std::exception& e) {
        failures[rank] = "rank " + std::to_string(rank) + " threw: " + e.what();
        threw = true;
        // Closing this rank's connections fails its peers' pending calls at once.
        group.connections[rank] = Connection();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& f : failures) {
    if (!f.empty()) ADD_FAILURE() << fullCaseName(p.c) << ": " << f;
  }
  if (threw) slot.reset();
}

std::vector<MatrixParam> paramsFor(const TransportUnderTest& t, Collective c) {
  std::vector<MatrixParam> out;
  for (int n : kRanks) {
    if (n > t.maxRanks) continue;
    for (const Case& k : matrixCases(c, n)) out.push_back({t, k});
  }
  return out;
}

std::string paramName(const ::testing::TestParamInfo<MatrixParam>& info) {
  return caseName(info.param.c);
}

// Connections live for one suite (one collective of one transport).
class MatrixSuite : public ::testing::TestWithParam<MatrixParam> {
 public:
  static void TearDownTestSuite() { groups().clear(); }
};

class Allreduce : public MatrixSuite {};
class ReduceScatter : public MatrixSuite {};
class Allgatherv : public MatrixSuite {};
class Broadcast : public MatrixSuite {};
class Alltoallv : public MatrixSuite {};
class Barrier : public MatrixSuite {};
class SendRecv : public MatrixSuite {};

TEST_P(Allreduce, MatchesReference) { runMatrixCase(GetParam()); }
TEST_P(ReduceScatter, MatchesReference) { runMatrixCase(GetParam()); }
TEST_P(Allgatherv, MatchesReference) { runMatrixCase(GetParam()); }
TEST_P(Broadcast, MatchesReference) { runMatrixCase(GetParam()); }
TEST_P(Alltoallv, MatchesReference) { runMatrixCase(GetParam()); }
TEST_P(Barrier, NoRankLeavesBeforeEveryRankEntered) { runMatrixCase(GetParam()); }
TEST_P(SendRecv, MatchesReference) { runMatrixCase(GetParam()); }

// Every collective's suite for one transport, its tests named Label/Collective.Test/case. Each
// suite is named after its Collective.
#define HORA_MATRIX_SUITE(Label, Suite, transport) \
  INSTANTIATE_TEST_SUITE_P(                        \
      Label, Suite, ::testing::ValuesIn(paramsFor(transport, Collective::Suite)), paramName)
#define HORA_COLLECTIVE_MATRIX(Label, transport)      \
  HORA_MATRIX_SUITE(Label, Allreduce, transport);     \
  HORA_MATRIX_SUITE(Label, ReduceScatter, transport); \
  HORA_MATRIX_SUITE(Label, Allgatherv, transport);    \
  HORA_MATRIX_SUITE(Label, Broadcast, transport);     \
  HORA_MATRIX_SUITE(Label, Alltoallv, transport);     \
  HORA_MATRIX_SUITE(Label, Barrier, transport);       \
  HORA_MATRIX_SUITE(Label, SendRecv, transport)

// The transports under test, one line each.
HORA_COLLECTIVE_MATRIX(Tcp, kTcp);
HORA_COLLECTIVE_MATRIX(Shm, kShm);
HORA_MATRIX_SUITE(ShmWindow, Allreduce, kShmWindow);
HORA_MATRIX_SUITE(ShmWindow, Broadcast, kShmWindow);

}  // namespace
}  // namespace test
}  // namespace hora
