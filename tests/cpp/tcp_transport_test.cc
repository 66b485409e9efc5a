// The TCP transport with N ranks as threads of this process over a MemoryStore: what is particular
// to TCP (bit-exact rank order across segments, subsets sharing sockets, the control channel, the
// failure paths: strangers, wrong secret, dead and silent peers, missing ranks). Every collective
// against its reference, at every size, dtype and op, runs in collective_matrix_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/collectives/algorithm_table.h"
#include "core/common/errors.h"
#include "core/config.h"
#include "core/net/frame.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/store/memory_store.h"
#include "core/transport/transport.h"
#include "tests/cpp/collective_checks.h"
#include "tests/cpp/connect_options.h"
#include "tests/cpp/peer_closed.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

const char kSecret[] = "tcp-transport-test";

ConnectOptions options(int rank, int size) { return test::loopbackOptions(rank, size, kSecret); }

Connection connect(Store& store, const ConnectOptions& o) {
  return makeTransport("tcp")->connect(o, store);
}

// Throws with the message `what()` builds when ok is false (the message is built only then).
template <typename Message>
void require(bool ok, Message&& what) {
  if (!ok) throw std::runtime_error(what());
}
void require(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(what);
}

// One case of the shared collective checks on c; members[i] is the data identity of c's rank i.
void check(Communicator& c, const std::vector<int>& members, test::Collective collective,
           size_t count, DataType dt = DataType::UInt8, ReduceOp op = ReduceOp::Sum, int root = 0) {
  test::Case k;
  k.collective = collective;
  k.ranks = c.size();
  k.count = count;
  k.dtype = dt;
  k.op = op;
  k.root = root;
  test::CheckContext context;
  context.rankOrderedFloats = true;
  context.members = members;
  std::string failure = test::runCase(c, k, context);
  require(failure.empty(), [&] { return test::fullCaseName(k) + ": " + failure; });
}

void checkAllreduce(Communicator& c, const std::vector<int>& members, size_t count, DataType dt,
                    ReduceOp op) {
  check(c, members, test::Collective::Allreduce, count, dt, op);
}

// Float sums on 3+ ranks reduce every element in rank order, ((v0 + v1) + v2) ..., bit for bit,
// also when each rank's block spans several pipeline segments. Random values make the order show.
TEST(TcpTransport, FloatSumsFoldInRankOrderAcrossSegments) {
  for (int n : {3, 5}) {
    const size_t count = collectives::kRingSegmentBytes / 4 * static_cast<size_t>(n) * 3 + 7;
    auto input = [count](int rank) {
      std::mt19937 gen(1234 + rank);
      std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
      std::vector<float> v(count);
      for (auto& x : v) x = dist(gen) * (rank % 2 == 0 ? 1e-3f : 1.0f);
      return v;
    };
    std::vector<float> expected = input(0);
    for (int r = 1; r < n; ++r) {
      std::vector<float> next = input(r);
      for (size_t i = 0; i < count; ++i) expected[i] = expected[i] + next[i];
    }
    MemoryStore store;
    test::spawnRanks(n, [&](int rank) {
      Connection conn = connect(store, options(rank, n));
      std::vector<float> buf = input(rank);
      conn.world->allreduce(buf.data(), count, DataType::Float32, ReduceOp::Sum);
      require(std::memcmp(buf.data(), expected.data(), count * sizeof(float)) == 0, [&] {
        return "rank " + std::to_string(rank) + " of " + std::to_string(n) +
               ": not the rank-order sum";
      });
    });
  }
}

TEST(TcpTransport, SubsetsShareTheSocketsAndRunConcurrently) {
  const int n = 7;
  const std::vector<int> a = {0, 2, 3, 6}, b = {1, 4, 5};
  MemoryStore store;
  test::spawnRanks(n, [&](int rank) {
    Connection conn = connect(store, options(rank, n));
    bool inA = std::find(a.begin(), a.end(), rank) != a.end();
    const std::vector<int>& mine = inA ? a : b;
    auto sub = conn.world->subset(mine);
    require(sub->size() == static_cast<int>(mine.size()), "subset size");
    require(mine[sub->rank()] == rank, "subset rank");
    checkAllreduce(*sub, mine, 1001, DataType::Float32, ReduceOp::Sum);
    checkAllreduce(*sub, mine, test::multiSegmentCount(sub->size(), DataType::Int32),
                   DataType::Int32, ReduceOp::Sum);
    check(*sub, mine, test::Collective::Allgatherv, 333);
    check(*sub, mine, test::Collective::Broadcast, 4096, DataType::UInt8, ReduceOp::Sum,
          sub->size() - 1);
    check(*sub, mine, test::Collective::ReduceScatter, 100, DataType::Float64, ReduceOp::Min);
    check(*sub, mine, test::Collective::Alltoallv, 50);
    sub->barrier();
    // A subset of a subset: its first and last members.
    if (sub->rank() == 0 || sub->rank() == sub->size() - 1) {
      auto inner = sub->subset({0, sub->size() - 1});
      std::vector<int> innerMembers = {mine.front(), mine.back()};
      checkAllreduce(*inner, innerMembers, 77, DataType::Int16, ReduceOp::Max);
    }
    // The world still works afterwards: the streams stayed aligned.
    std::vector<int> all(n);
    std::iota(all.begin(), all.end(), 0);
    checkAllreduce(*conn.world, all, 1001, DataType::Float32, ReduceOp::Sum);
    bool threw = false;
    try {
      conn.world->subset({(rank + 1) % n});
    } catch (const InvalidArgument&) {
      threw = true;
    }
    require(threw, "a subset without this rank must be refused");
  });
}

TEST(TcpTransport, DefaultListenHostWorks) {
  MemoryStore store;
  test::spawnRanks(2, [&](int rank) {
    ConnectOptions o = options(rank, 2);
    o.listenHost = "";
    Connection conn = connect(store, o);
    checkAllreduce(*conn.world, {0, 1}, 10, DataType::Float32, ReduceOp::Sum);
  });
}

TEST(TcpTransport, RegistryNames) {
  EXPECT_EQ(makeTransport("tcp")->name(), "tcp");
  EXPECT_EQ(makeTransport("gloo")->name(), "tcp");
#if HORA_HAVE_MPI
  EXPECT_EQ(makeTransport("mpi")->name(), "mpi");
#else
  EXPECT_THROW(makeTransport("mpi"), NotSupported);
#endif
  EXPECT_THROW(makeTransport("carrier-pigeon"), InvalidArgument);
}

TEST(TcpTransport, BadArgumentsAreRefusedWithoutBreakingTheCommunicator) {
  MemoryStore store;
  test::spawnRanks(2, [&](int rank) {
    Connection conn = connect(store, options(rank, 2));
    Communicator& c = *conn.world;
    float x = 1;
    auto refused = [&](const std::function<void()>& f) {
      try {
        f();
      } catch (const InvalidArgument&) {
        return true;
      }
      return false;
    };
    require(refused([&] { c.allreduce(&x, 1, DataType::Float32, ReduceOp::Average); }),
            "average refused");
    require(refused([&] { c.broadcast(&x, 4, 2); }), "bad root refused");
    require(refused([&] { c.allgatherv(&x, &x, {4}); }), "bad block list refused");
    require(refused([&] { c.sendRecv(5, &x, 4, 0, &x, 0); }), "bad peer refused");
    checkAllreduce(c, {0, 1}, 3, DataType::Float32, ReduceOp::Sum);
  });
}

// ---- set-up failures -----------------------------------------------------------------------

TEST(TcpTransport, StrangersAtTheListeningPortAreDropped) {
  const int n = 3;
  MemoryStore store;
  std::mutex m;
  std::condition_variable cv;
  bool strangersDone = false;
  std::vector<std::string> outcomes;
  std::thread stranger([&] {
    std::string host;
    int port = 0;
    net::parseHostPort(store.get("addr/1", 5000ms), &host, &port);
    auto deadline = Clock::now() + 5000ms;
    // 1. Garbage instead of a handshake.
    {
      net::Socket s = net::connectWithRetry(host, port, deadline);
      std::string junk(300, 'G');
      net::sendAll(s.fd(), junk.data(), junk.size(), deadline, "stranger");
      char buf[64];
      for (;;) {
        if (!net::waitFor(s.fd(), POLLIN, deadline)) break;
        net::IoResult r = net::recvSome(s.fd(), buf, sizeof(buf));
        if (r.status == net::IoStatus::Closed || r.status == net::IoStatus::Failed) {
          outcomes.push_back("garbage dropped");
          break;
        }
      }
    }
    // 2. A handshake with the wrong secret, posing as rank 2.
    {
      net::Socket s = net::connectWithRetry(host, port, deadline);
      net::Handshake hs = net::Handshake::connector("wrong", net::PeerKind::Data, 2, 1);
      try {
        net::runHandshake(s.fd(), hs, deadline, "stranger");
      } catch (const IoError& e) {
        if (std::string(e.what()).find("authentication failed") != std::string::npos) {
          outcomes.push_back("wrong secret refused");
        }
      }
    }
    // 3. A silent connection, held open until the job has connected.
    net::Socket silent = net::connectWithRetry(host, port, deadline);
    {
      std::lock_guard<std::mutex> lock(m);
      strangersDone = true;
    }
    cv.notify_all();
    std::this_thread::sleep_for(300ms);
  });
  std::exception_ptr failure;  // rethrown once the stranger's thread is joined
  try {
    test::spawnRanks(n, [&](int rank) {
      if (rank == 2) {  // arrives only after the strangers had their go at rank 1
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return strangersDone; });
      }
      Connection conn = connect(store, options(rank, n));
      checkAllreduce(*conn.world, {0, 1, 2}, 1001, DataType::Float32, ReduceOp::Sum);
    });
  } catch (...) {
    failure = std::current_exception();
  }
  stranger.join();
  if (failure) std::rethrow_exception(failure);
  EXPECT_EQ(outcomes, (std::vector<std::string>{"garbage dropped", "wrong secret refused"}));
}

// Strangers that connect and say nothing, more of them than the cap, while rank 0 waits for rank
// 1: the oldest is evicted at once, a silent one is dropped at the handshake timeout, and rank 1
// still gets in.
TEST(TcpTransport, UnauthenticatedConnectionsAreCappedAndTimeOut) {
  MemoryStore store;
  std::mutex m;
  std::condition_variable cv;
  bool strangersDone = false;
  std::vector<std::string> outcomes;
  std::thread stranger([&] {
    std::string host;
    int port = 0;
    net::parseHostPort(store.get("addr/0", 5000ms), &host, &port);
    auto deadline = Clock::now() + 5000ms;
    std::vector<net::Socket> held;
    for (int i = 0; i < net::kMaxPendingHandshakes + 1; ++i) {
      held.push_back(net::connectWithRetry(host, port, deadline));
    }
    if (test::peerClosedWithin(held[0].fd(), 5000ms)) outcomes.push_back("oldest evicted");
    if (test::peerClosedWithin(held.back().fd(), net::kHandshakeTimeout * 3)) {
      outcomes.push_back("silent one timed out");
    }
    {
      std::lock_guard<std::mutex> lock(m);
      strangersDone = true;
    }
    cv.notify_all();
  });
  std::exception_ptr failure;
  try {
    test::spawnRanks(2, [&](int rank) {
      if (rank == 1) {
        std::unique_lock<std::mutex> lock(m);
        cv.wait_for(lock, net::kHandshakeTimeout * 4, [&] { return strangersDone; });
      }
      ConnectOptions o = options(rank, 2);
      o.startTimeout = net::kHandshakeTimeout * 6;
      Connection conn = connect(store, o);
      checkAllreduce(*conn.world, {0, 1}, 17, DataType::Float32, ReduceOp::Sum);
    });
  } catch (...) {
    failure = std::current_exception();
  }
  stranger.join();
  if (failure) std::rethrow_exception(failure);
  EXPECT_EQ(outcomes, (std::vector<std::string>{"oldest evicted", "silent one timed out"}));
}

TEST(TcpTransport, MissingRankTimesOutNamingIt) {
  MemoryStore store;
  std::vector<std::string> messages(2);
  auto start = Clock::now();
  test::spawnRanks(2, [&](int rank) {
    ConnectOptions o = options(rank, 3);  // rank 2 never starts
    o.startTimeout = 400ms;
    try {
      connect(store, o);
    } catch (const TimeoutError& e) {
      messages[rank] = e.what();
    }
  });
  EXPECT_LT(Clock::now() - start, 3000ms);
  for (const auto& m : messages) EXPECT_NE(m.find("rank(s) 2"), std::string::npos) << m;
}

// A store that goes away (the launcher stopped it) while check() or getMany() is asked.
class VanishingStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override { inner_.set(key, value); }
  std::string get(const std::string& key, Millis timeout) override {
    return inner_.get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return inner_.add(key, delta); }
  bool check(const std::vector<std::string>& keys) override {
    if (gone) throw IoError("store at test: connection closed by peer");
    return inner_.check(keys);
  }
  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    inner_.wait(keys, timeout);
  }
  std::vector<std::optional<std::string>> getMany(const std::vector<std::string>& keys,
                                                  Millis timeout) override {
    if (gone) throw IoError("store at test: connection closed by peer");
    return inner_.getMany(keys, timeout);
  }
  std::atomic<bool> gone{false};

 private:
  MemoryStore inner_;
};

TEST(TcpTransport, RankWaitingForPeersGivesUpWhenTheStoreGoesAway) {
  VanishingStore store;
  std::string message;
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    store.gone = true;
  });
  ConnectOptions o = options(0, 2);  // rank 1 never starts
  o.startTimeout = 600000ms;         // a TimeoutError would come only after this
  try {
    connect(store, o);
  } catch (const IoError& e) {
    message = e.what();
  }
  stopper.join();
  EXPECT_NE(message.find("rank 0: the rendezvous store, served by the launcher, failed while this "
                         "rank was waiting for rank(s) 1 to connect: store at test: connection "
                         "closed by peer"),
            std::string::npos)
      << message;
}

TEST(TcpTransport, WrongSecretNeverConnects) {
  MemoryStore store;
  std::vector<std::string> messages(2);
  test::spawnRanks(2, [&](int rank) {
    ConnectOptions o = options(rank, 2);
    // Rank 0 listens past rank 1's deadline, so rank 1's last attempt meets it, not a closed port.
    o.startTimeout = rank == 0 ? 1500ms : 500ms;
    if (rank == 1) o.secret = "another job";
    try {
      connect(store, o);
    } catch (const TimeoutError& e) {
      messages[rank] = e.what();
    }
  });
  EXPECT_NE(messages[0].find("rank(s) 1"), std::string::npos) << messages[0];
  EXPECT_NE(messages[1].find("authentication failed"), std::string::npos) << messages[1];
}

// ---- failures during collectives -----------------------------------------------------------

TEST(TcpTransport, PeerThatClosesFailsOthersQuicklyWithIoError) {
  for (bool large : {false, true}) {
    const int n = 3;
    MemoryStore store;
    test::spawnRanks(n, [&](int rank) {
      ConnectOptions o = options(rank, n);
      o.opTimeout = 20000ms;  // far longer than the test may take: only EOF can end the wait
      Connection conn = connect(store, o);
      conn.world->barrier();
      if (rank == 2) return;  // closes every socket of rank 2
      size_t count = large ? test::multiSegmentCount(n, DataType::Float32) : 100;
      std::vector<float> buf(count, 1.0f);
      auto start = Clock::now();
      bool ioError = false;
      std::string message;
      try {
        conn.world->allreduce(buf.data(), count, DataType::Float32, ReduceOp::Sum);
      } catch (const IoError& e) {
        ioError = true;
        message = e.what();
      }
      require(ioError, [&] { return "expected IoError on rank " + std::to_string(rank); });
      require(Clock::now() - start < 3000ms, "IoError took too long");
      // Unusable afterwards, and says why.
      bool again = false;
      try {
        conn.world->barrier();
      } catch (const IoError&) {
        again = true;
      }
      require(again, "a failed communicator must refuse further work");
    });
  }
}

TEST(TcpTransport, SilentPeerTimesOut) {
  MemoryStore store;
  std::string message;
  Clock::duration took{};
  std::mutex m;
  std::condition_variable cv;
  bool rank0Done = false;
  test::spawnRanks(2, [&](int rank) {
    ConnectOptions o = options(rank, 2);
    o.opTimeout = 300ms;
    Connection conn = connect(store, o);
    conn.world->barrier();
    if (rank == 1) {  // alive, connections open, but never joins the collective
      std::unique_lock<std::mutex> lock(m);
      cv.wait_for(lock, 5000ms, [&] { return rank0Done; });
      return;
    }
    float x = 1;
    auto start = Clock::now();
    try {
      conn.world->allreduce(&x, 1, DataType::Float32, ReduceOp::Sum);
    } catch (const TimeoutError& e) {
      message = e.what();
    }
    took = Clock::now() - start;
    std::lock_guard<std::mutex> lock(m);
    rank0Done = true;
    cv.notify_all();
  });
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3000ms);  // generous: the box may be busy; without the timeout it would hang
}

// ---- control channel -----------------------------------------------------------------------

TEST(TcpControlChannel, StarMessagingWakeupTimeoutAndClose) {
  const int n = 4;
  MemoryStore store;
  std::mutex m;
  std::condition_variable cv;
  bool rank0Done = false;
  bool rank3Gone = false;
  test::spawnRanks(n, [&](int rank) {
    Connection conn = connect(store, options(rank, n));
    ControlChannel& ch = *conn.control;
    require(ch.rank() == rank && ch.size() == n, "control rank/size");
    std::vector<ControlChannel::Message> got;
    if (rank == 0) {
      while (got.size() < 3) ch.poll(got, 5000ms);
      for (const auto& m : got) {
        require(m.bytes == "hello from " + std::to_string(m.from), "message body");
        ch.send(m.from, "ack " + std::to_string(m.from));
      }
    } else {
      ch.send(0, "hello from " + std::to_string(rank));
      while (got.empty()) ch.poll(got, 5000ms);
      require(got[0].from == 0 && got[0].bytes == "ack " + std::to_string(rank), "ack");
      got.erase(got.begin());  // rank 0's next message may have come in the same poll
      bool refused = false;
      try {
        ch.send(rank == 1 ? 2 : 1, "sideways");
      } catch (const InvalidArgument&) {
        refused = true;
      }
      require(refused, "non-root ranks talk to rank 0 only");
    }
    // Large messages both ways at once (neither side reads until its own send is done).
    if (rank <= 1) {
      std::string big(3 << 20, static_cast<char>('a' + rank));
      ch.send(1 - rank, big);
      if (rank == 0) got.clear();  // the hellos
      while (got.empty()) ch.poll(got, 5000ms);
      std::string expect(3 << 20, static_cast<char>('a' + 1 - rank));
      require(got.size() == 1 && got[0].bytes == expect, "big message");
    }
    conn.world->barrier();
    // Timeout with nothing to read, then wakeup from another thread.
    got.clear();
    auto start = Clock::now();
    ch.poll(got, 50ms);
    require(got.empty() && Clock::now() - start >= 45ms, "poll timeout");
    std::thread waker([&] {
      std::this_thread::sleep_for(30ms);
      ch.wakeup();
    });
    ch.poll(got, Millis(-1));
    waker.join();
    require(got.empty(), "wakeup returns without messages");
    // Polling first (a spin budget) changes nothing of what poll() returns or when.
    start = Clock::now();
    ch.poll(got, 30ms, Micros(500000));
    auto took = Clock::now() - start;
    require(got.empty() && took >= 25ms && took < 400ms, "the timeout ends a spinning poll");
    std::thread spinWaker([&] {
      std::this_thread::sleep_for(10ms);
      ch.wakeup();
    });
    ch.poll(got, Millis(-1), Micros(2000000));
    spinWaker.join();
    require(got.empty(), "wakeup ends a spinning poll");
    // A wake-up that comes while nobody polls is kept for the next poll, spinning or not.
    for (Micros spin : {Micros(0), Micros(2000000)}) {
      ch.wakeup();
      start = Clock::now();
      ch.poll(got, 3000ms, spin);
      require(got.empty() && Clock::now() - start < 1000ms, "an earlier wakeup ends a poll");
    }
    conn.world->barrier();
    if (rank == 0) {
      for (int r = 1; r < n; ++r) ch.send(r, "while spinning");
    } else {
      while (got.empty()) ch.poll(got, 5000ms, Micros(1000000));
      require(got[0].from == 0 && got[0].bytes == "while spinning", "message seen while spinning");
    }
    conn.world->barrier();
    // A peer that goes away makes rank 0's poll fail naming it, after its last message: sent
    // just before it hung up, as a frame of exactly three 64 KiB reads, so that the read after
    // them meets the hang-up in the same call. Ranks 1 and 2 stay connected until rank 0 has
    // seen that.
    const std::string lastWords((3 << 16) - net::kFrameHeaderBytes, 'w');
    if (rank == 3) {
      ch.send(0, lastWords);
      conn.control.reset();
      {
        std::lock_guard<std::mutex> lock(m);
        rank3Gone = true;
      }
      cv.notify_all();
      return;
    }
    if (rank == 0) {
      {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return rank3Gone; });
      }
      std::this_thread::sleep_for(50ms);  // the hang-up has reached this end too
      got.clear();
      bool failed = false;
      try {
        for (int i = 0; i < 100 && !failed; ++i) ch.poll(got, 1000ms);
      } catch (const IoError& e) {
        failed = std::string(e.what()).find("rank 3") != std::string::npos;
      }
      {
        std::lock_guard<std::mutex> lock(m);
        rank0Done = true;
      }
      cv.notify_all();
      require(failed, "closed control connection must raise IoError naming rank 3");
      require(got.size() == 1 && got[0].from == 3 && got[0].bytes == lastWords,
              "the last message before a hang-up is delivered before the hang-up fails");
    } else {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return rank0Done; });
    }
  });
}

TEST(TcpControlChannel, SizeOneJob) {
  MemoryStore store;
  Connection conn = connect(store, options(0, 1));
  std::vector<ControlChannel::Message> got;
  conn.control->wakeup();
  conn.control->poll(got, 1000ms);
  EXPECT_TRUE(got.empty());
  EXPECT_THROW(conn.control->send(1, "x"), InvalidArgument);
}

}  // namespace
}  // namespace hora
