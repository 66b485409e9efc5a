// The TCP transport's links opened on first use (core/transport/tcp/link_opener.h): which links a
// workload opens, that opening one keeps the handshake's rules, and that a peer that is gone or
// never comes fails the rank waiting for its link within the documented bounds. Ranks are threads
// of this process over a MemoryStore.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "core/collectives/algorithm_table.h"
#include "core/common/errors.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/store/memory_store.h"
#include "core/transport/tcp/communicator.h"
#include "core/transport/transport.h"
#include "tests/cpp/connect_options.h"
#include "tests/cpp/counting_store.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

using namespace std::chrono_literals;

const char kSecret[] = "tcp-lazy-links-test";

Connection connect(Store& store, const ConnectOptions& o) {
  return makeTransport("tcp")->connect(o, store);
}

std::vector<int> linkedRanks(Connection& c) {
  auto* tcp = dynamic_cast<tcp::TcpCommunicator*>(c.world.get());
  if (tcp == nullptr) throw std::runtime_error("the world is not a TCP communicator");
  return tcp->linkedRanks();
}

std::string describe(const std::vector<int>& ranks) {
  std::string text = "[";
  for (int r : ranks) text += (text.size() > 1 ? ", " : "") + std::to_string(r);
  return text + "]";
}

// The ring's neighbours of rank in a world of n, sorted.
std::vector<int> ringNeighbours(int rank, int n) {
  std::vector<int> v = {(rank + n - 1) % n, (rank + 1) % n};
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

// An allreduce the table sends round the ring: integers (no rank order needed), at least the
// ring's minimum size.
void ringAllreduce(Communicator& c) {
  const size_t count = collectives::kAllreduceRingMinBytes / sizeof(int32_t) * 2 + 3;
  ASSERT_EQ(collectives::chooseAllreduce(count * 4, count, c.size()),
            collectives::AllreduceAlgorithm::Ring);
  std::vector<int32_t> buf(count, c.rank() + 1);
  c.allreduce(buf.data(), count, DataType::Int32, ReduceOp::Sum);
  const int32_t expected = c.size() * (c.size() + 1) / 2;
  for (size_t i = 0; i < count; i += 997) {
    if (buf[i] != expected) throw std::runtime_error("wrong sum at " + std::to_string(i));
  }
}

TEST(TcpLazyLinks, ARingAllreduceOpensOnlyTheRingNeighbourLinks) {
  for (int n : {4, 5, 8}) {
    MemoryStore store;
    std::vector<std::vector<int>> atStart(n), afterRing(n), afterSecond(n);
    test::spawnRanks(n, [&](int rank) {
      Connection conn = connect(store, test::loopbackOptions(rank, n, kSecret));
      atStart[rank] = linkedRanks(conn);
      ringAllreduce(*conn.world);
      afterRing[rank] = linkedRanks(conn);
      ringAllreduce(*conn.world);  // the links are reused, not opened again
      afterSecond[rank] = linkedRanks(conn);
    });
    for (int r = 0; r < n; ++r) {
      // A rank still in its set-up takes a link a faster peer already opens: never another one.
      EXPECT_TRUE(std::includes(afterRing[r].begin(), afterRing[r].end(), atStart[r].begin(),
                                atStart[r].end()))
          << "n=" << n << " rank " << r << ": " << describe(atStart[r]);
      EXPECT_EQ(afterRing[r], ringNeighbours(r, n))
          << "n=" << n << " rank " << r << ": " << describe(afterRing[r]);
      EXPECT_EQ(afterSecond[r], afterRing[r]) << "n=" << n << " rank " << r;
    }
  }
}

// Recursive doubling at 8 ranks: the partners r ^ 1, r ^ 2 and r ^ 4, log2 N links.
TEST(TcpLazyLinks, ASmallAllreduceOpensOnlyTheRecursiveDoublingPartners) {
  const int n = 8;
  MemoryStore store;
  std::vector<std::vector<int>> linked(n);
  test::spawnRanks(n, [&](int rank) {
    Connection conn = connect(store, test::loopbackOptions(rank, n, kSecret));
    std::vector<int32_t> buf(64, rank);
    ASSERT_EQ(collectives::chooseAllreduce(buf.size() * 4, buf.size(), n),
              collectives::AllreduceAlgorithm::RecursiveDoubling);
    conn.world->allreduce(buf.data(), buf.size(), DataType::Int32, ReduceOp::Max);
    if (buf[0] != n - 1) throw std::runtime_error("wrong maximum");
    linked[rank] = linkedRanks(conn);
  });
  for (int r = 0; r < n; ++r) {
    std::vector<int> partners = {r ^ 1, r ^ 2, r ^ 4};
    std::sort(partners.begin(), partners.end());
    EXPECT_EQ(linked[r], partners) << "rank " << r << ": " << describe(linked[r]);
  }
}

// Every rank's linked ranks once connected (atStart) and after a workload (linked).
struct LinksAround {
  std::vector<std::vector<int>> atStart, linked;
};

// Connects n ranks over TCP and runs `workload(connection, rank)` on each.
LinksAround linksAround(int n, const std::function<void(Connection&, int)>& workload) {
  MemoryStore store;
  LinksAround links{std::vector<std::vector<int>>(n), std::vector<std::vector<int>>(n)};
  test::spawnRanks(n, [&](int rank) {
    Connection conn = connect(store, test::loopbackOptions(rank, n, kSecret));
    links.atStart[rank] = linkedRanks(conn);
    workload(conn, rank);
    links.linked[rank] = linkedRanks(conn);
  });
  return links;
}

// Every rank linked, beyond its links at start, only to ranks a power of two away: 2 log2 N more
// at most.
void expectOnlyPowerOfTwoPartnersAdded(const LinksAround& links) {
  const std::vector<std::vector<int>>& atStart = links.atStart;
  const std::vector<std::vector<int>>& linked = links.linked;
  const int n = static_cast<int>(linked.size());
  int maxAdded = 0;
  for (int d = 1; d < n; d *= 2) maxAdded += 2;
  for (int r = 0; r < n; ++r) {
    std::vector<int> allowed = atStart[r];
    for (int d = 1; d < n; d *= 2) {
      allowed.push_back((r + d) % n);
      allowed.push_back((r - d + n) % n);
    }
    std::sort(allowed.begin(), allowed.end());
    allowed.erase(std::unique(allowed.begin(), allowed.end()), allowed.end());
    EXPECT_TRUE(std::includes(allowed.begin(), allowed.end(), linked[r].begin(), linked[r].end()))
        << "rank " << r << ": " << describe(linked[r]);
    EXPECT_LE(linked[r].size(), atStart[r].size() + maxAdded) << "rank " << r;
  }
}

// From kAlltoallBruckMinRanks ranks an alltoall takes Bruck's exchange: it opens links only to
// the ranks a power of two away, 2 log2 N - 1 of them at 32 ranks instead of 31, and every rank
// gets every block.
TEST(TcpLazyLinks, AnAlltoallOfManyRanksOpensOnlyThePowerOfTwoPartners) {
  const int n = collectives::kAlltoallBruckMinRanks;
  LinksAround links = linksAround(n, [&](Connection& conn, int rank) {
    // Rank r sends r + 1 values of 100 * r + d to rank d.
    std::vector<size_t> sendBytes(n, (rank + 1) * sizeof(int32_t)), recvBytes(n);
    std::vector<int32_t> in, out;
    for (int d = 0; d < n; ++d) {
      recvBytes[d] = (d + 1) * sizeof(int32_t);
      in.insert(in.end(), rank + 1, 100 * rank + d);
    }
    out.resize(static_cast<size_t>(n) * (n + 1) / 2);
    conn.world->alltoallv(in.data(), sendBytes, out.data(), recvBytes);
    size_t at = 0;
    for (int s = 0; s < n; ++s) {
      for (int i = 0; i <= s; ++i, ++at) {
        if (out[at] != 100 * s + rank)
          throw std::runtime_error("wrong block from " + std::to_string(s));
      }
    }
  });
  expectOnlyPowerOfTwoPartnersAdded(links);
}

// From kAllgatherBruckMinRanks ranks a small allgather takes Bruck's rounds, so it too opens only
// the links to the ranks a power of two away, where the ring would take N - 1 steps.
TEST(TcpLazyLinks, ASmallAllgatherOfManyRanksOpensOnlyThePowerOfTwoPartners) {
  const int n = collectives::kAllgatherBruckMinRanks;
  LinksAround links = linksAround(n, [&](Connection& conn, int rank) {
    // Rank r contributes r % 3 + 1 values of r.
    std::vector<size_t> bytes(n);
    std::vector<int32_t> want;
    for (int s = 0; s < n; ++s) {
      bytes[s] = (s % 3 + 1) * sizeof(int32_t);
      want.insert(want.end(), s % 3 + 1, s);
    }
    std::vector<int32_t> mine(rank % 3 + 1, rank), out(want.size());
    conn.world->allgatherv(mine.data(), out.data(), bytes);
    if (out != want) throw std::runtime_error("wrong allgather on rank " + std::to_string(rank));
  });
  expectOnlyPowerOfTwoPartnersAdded(links);
  // Every round moves bytes both ways, so every partner is linked (the ring would link two).
  const std::vector<std::vector<int>>& linked = links.linked;
  for (int r = 0; r < n; ++r) {
    for (int d = 1; d < n; d *= 2) {
      for (int p : {(r + d) % n, (r - d + n) % n}) {
        EXPECT_TRUE(std::count(linked[r].begin(), linked[r].end(), p) == 1)
            << "rank " << r << " not linked to " << p << ": " << describe(linked[r]);
      }
    }
  }
}

// Set-up asks the store a few times per rank, whatever the job's size: its own address, one wait
// for the lower ranks' addresses, a look now and then for the higher ones' (one request for all
// those still missing), rank 0's verdict. Reading the addresses one rank at a time took every rank
// N - 1 requests or more, and the store N (N - 1) over a start-up.
TEST(TcpLazyLinks, SetUpAsksTheStoreAFewTimesPerRankNotOncePerRank) {
  const int n = 24;
  MemoryStore shared;
  std::vector<std::unique_ptr<test::CountingStore>> stores;
  for (int r = 0; r < n; ++r) stores.push_back(std::make_unique<test::CountingStore>(shared));
  test::spawnRanks(n, [&](int rank) {
    Connection conn = connect(*stores[rank], test::loopbackOptions(rank, n, kSecret));
  });
  std::string counts;
  int most = 0;
  for (const auto& s : stores) {
    counts += (counts.empty() ? "" : ", ") + std::to_string(s->requests());
    most = std::max(most, s->requests());
  }
  EXPECT_LT(most, n - 1) << "requests by rank: " << counts;
}

TEST(TcpLazyLinks, TheEagerMeshSettingConnectsEveryPairAtStart) {
  const int n = 4;
  MemoryStore store;
  std::vector<std::vector<int>> atStart(n);
  ::setenv("HORA_TCP_EAGER_MESH", "1", 1);
  try {
    test::spawnRanks(n, [&](int rank) {
      Connection conn = connect(store, test::loopbackOptions(rank, n, kSecret));
      atStart[rank] = linkedRanks(conn);
      ringAllreduce(*conn.world);
    });
  } catch (...) {
    ::unsetenv("HORA_TCP_EAGER_MESH");
    throw;
  }
  ::unsetenv("HORA_TCP_EAGER_MESH");
  for (int r = 0; r < n; ++r) {
    std::vector<int> others;
    for (int j = 0; j < n; ++j) {
      if (j != r) others.push_back(j);
    }
    EXPECT_EQ(atStart[r], others) << "rank " << r << ": " << describe(atStart[r]);
  }
}

// After start-up the listener still takes only data links dialled by a higher rank that proves the
// secret: a wrong secret, and a lower rank dialling, are refused, and the job goes on.
TEST(TcpLazyLinks, LinksOpenedAfterStartKeepTheHandshakesRules) {
  const int n = 3;
  MemoryStore store;
  std::mutex m;
  std::condition_variable cv;
  int phase = 0;  // 1: the ranks are connected; 2: the strangers are done
  std::vector<std::string> outcomes;
  std::thread stranger([&] {
    {
      std::unique_lock<std::mutex> lock(m);
      cv.wait_for(lock, 10s, [&] { return phase == 1; });
    }
    std::string host;
    int port = 0;
    net::parseHostPort(store.get("addr/1", 5000ms), &host, &port);
    auto deadline = Clock::now() + 5000ms;
    auto attempt = [&](const std::string& secret, int claimedRank, const char* label) {
      net::Socket s = net::connectWithRetry(host, port, deadline);
      net::Handshake hs = net::Handshake::connector(secret, net::PeerKind::Data, claimedRank, 1);
      try {
        net::runHandshake(s.fd(), hs, deadline, "stranger");
        outcomes.push_back(std::string(label) + " accepted");
      } catch (const Error& e) {
        outcomes.push_back(std::string(label) + " refused");
      }
    };
    attempt("wrong", 2, "wrong secret");
    attempt(kSecret, 0, "lower rank");
    {
      std::lock_guard<std::mutex> lock(m);
      phase = 2;
    }
    cv.notify_all();
  });
  std::exception_ptr failure;
  try {
    test::spawnRanks(n, [&](int rank) {
      Connection conn = connect(store, test::loopbackOptions(rank, n, kSecret));
      if (rank == 1) {
        {
          std::lock_guard<std::mutex> lock(m);
          phase = 1;
        }
        cv.notify_all();
      }
      // Rank 1 serves the strangers while it waits for the others' links.
      if (rank != 1) {
        std::unique_lock<std::mutex> lock(m);
        cv.wait_for(lock, 10s, [&] { return phase == 2; });
      }
      ringAllreduce(*conn.world);
    });
  } catch (...) {
    failure = std::current_exception();
  }
  stranger.join();
  if (failure) std::rethrow_exception(failure);
  EXPECT_EQ(outcomes, (std::vector<std::string>{"wrong secret refused", "lower rank refused"}));
}

// A peer whose process is gone refuses connections: the rank that should dial it, and the rank
// that waits for it to dial, both fail with IoError long before the op timeout.
TEST(TcpLazyLinks, APeerGoneBeforeItsLinkExistsFailsTheOtherSideQuickly) {
  for (int goneRank : {0, 1}) {  // rank 1 dials rank 0: the acceptor, then the dialer is gone
    MemoryStore store;
    std::mutex m;
    std::condition_variable cv;
    bool gone = false;
    std::string message;
    Clock::duration took{};
    test::spawnRanks(2, [&](int rank) {
      ConnectOptions o = test::loopbackOptions(rank, 2, kSecret);
      o.opTimeout = 30000ms;  // far longer than the test may take
      {
        Connection conn = connect(store, o);
        if (rank == goneRank) {
          conn = Connection();  // closes its listener: the process is gone as far as TCP knows
          std::lock_guard<std::mutex> lock(m);
          gone = true;
          cv.notify_all();
          return;
        }
        std::unique_lock<std::mutex> lock(m);
        cv.wait_for(lock, 10s, [&] { return gone; });
        lock.unlock();
        float x = 1;
        auto start = Clock::now();
        try {
          conn.world->allreduce(&x, 1, DataType::Float32, ReduceOp::Sum);
        } catch (const IoError& e) {
          message = e.what();
        }
        took = Clock::now() - start;
      }
    });
    EXPECT_NE(message.find("rank " + std::to_string(goneRank) + " at"), std::string::npos)
        << message;
    EXPECT_NE(message.find("exited or failed"), std::string::npos) << message;
    EXPECT_LT(took, 10000ms) << "gone rank " << goneRank;  // generous; the op timeout is 30 s
  }
}

// A peer that is alive but never reaches the collective: the wait for its link ends at the op
// timeout, naming it.
TEST(TcpLazyLinks, APeerThatNeverOpensItsLinkTimesOutNamingIt) {
  MemoryStore store;
  std::mutex m;
  std::condition_variable cv;
  bool connected = false, done = false;
  std::string message;
  test::spawnRanks(2, [&](int rank) {
    ConnectOptions o = test::loopbackOptions(rank, 2, kSecret);
    o.opTimeout = 300ms;
    Connection conn = connect(store, o);
    std::unique_lock<std::mutex> lock(m);
    if (rank == 0) {  // alive, listening, but never joins
      connected = true;
      cv.notify_all();
      cv.wait_for(lock, 10s, [&] { return done; });
      return;
    }
    // Once rank 0's set-up is over, nothing takes the link rank 1 dials.
    cv.wait_for(lock, 10s, [&] { return connected; });
    lock.unlock();
    float x = 1;
    try {
      conn.world->allreduce(&x, 1, DataType::Float32, ReduceOp::Sum);
    } catch (const TimeoutError& e) {
      message = e.what();
    }
    lock.lock();
    done = true;
    cv.notify_all();
  });
  EXPECT_NE(message.find("rank 1: rank 0 did not take the data link"), std::string::npos)
      << message;
}

// Rank 2 published its address and died before its control connection: only rank 0 waits for it
// at start, yet rank 1 must fail naming rank 2 too (through rank 0's verdict), not rank 0.
TEST(TcpLazyLinks, ARankThatDiesAfterPublishingItsAddressIsNamedByEveryRank) {
  MemoryStore store;
  store.set("addr/2", "127.0.0.1:1");  // nothing listens there
  std::vector<std::string> messages(2);
  test::spawnRanks(2, [&](int rank) {
    ConnectOptions o = test::loopbackOptions(rank, 3, kSecret);
    o.startTimeout = 1000ms;
    try {
      connect(store, o);
    } catch (const TimeoutError& e) {
      messages[rank] = e.what();
    }
  });
  EXPECT_NE(messages[0].find("rank 0: timed out after 1000 ms connecting to rank(s) 2"),
            std::string::npos)
      << messages[0];
  EXPECT_NE(messages[1].find("rank 1: rank 0 could not connect every rank: rank 0: timed out"),
            std::string::npos)
      << messages[1];
  EXPECT_NE(messages[1].find("rank(s) 2"), std::string::npos) << messages[1];
}

}  // namespace
}  // namespace hora
