// The TCP transport with N ranks as threads of this process over a MemoryStore: every collective
// against a reference computed here, for several sizes and dtypes, subsets, the control channel,
// and the failure paths (strangers, wrong secret, dead and silent peers, missing ranks).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/collectives/algorithm_table.h"
#include "core/common/errors.h"
#include "core/common/reduce.h"
#include "core/config.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/store/memory_store.h"
#include "core/transport/transport.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

using namespace std::chrono_literals;
using Bytes = std::vector<uint8_t>;

const char kSecret[] = "tcp-transport-test";

ConnectOptions options(int rank, int size) {
  ConnectOptions o;
  o.rank = rank;
  o.size = size;
  o.secret = kSecret;
  o.listenHost = "127.0.0.1";
  o.startTimeout = 10000ms;
  o.opTimeout = 10000ms;
  return o;
}

Connection connect(Store& store, const ConnectOptions& o) { return makeTransport("tcp")->connect(o, store); }

// Throws with the message `what()` builds when ok is false (the message is built only then).
template <typename Message>
void require(bool ok, Message&& what) {
  if (!ok) throw std::runtime_error(what());
}
void require(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(what);
}

// ---- typed test data -----------------------------------------------------------------------
// Values are chosen so every reduction is exact whatever the order of operations (small integers
// in floating types; integers wrap, which is associative), so results compare bit for bit.

void setValue(uint8_t* buf, DataType dt, size_t i, int64_t v) {
  switch (dt) {
    case DataType::UInt8: reinterpret_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case DataType::Int8: reinterpret_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case DataType::UInt16: reinterpret_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(v); break;
    case DataType::Int16: reinterpret_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v); break;
    case DataType::Int32: reinterpret_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::Int64: reinterpret_cast<int64_t*>(buf)[i] = v; break;
    case DataType::Float16:
      reinterpret_cast<uint16_t*>(buf)[i] = floatToHalf(static_cast<float>(v));
      break;
    case DataType::BFloat16:
      reinterpret_cast<uint16_t*>(buf)[i] = floatToBfloat16(static_cast<float>(v));
      break;
    case DataType::Float32: reinterpret_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::Float64: reinterpret_cast<double*>(buf)[i] = static_cast<double>(v); break;
    case DataType::Bool: buf[i] = v != 0; break;
  }
}

Bytes makeInput(DataType dt, ReduceOp op, size_t count, int rank) {
  Bytes b(count * dtypeSize(dt));
  for (size_t i = 0; i < count; ++i) {
    int64_t v;
    if (dt == DataType::Bool) {
      v = (rank + i) % 3 == 0;
    } else if (isFloating(dt)) {
      v = op == ReduceOp::Product ? ((rank + i) % 3 == 0 ? 2 : ((rank + i) % 5 == 0 ? -1 : 1))
                                  : static_cast<int64_t>((rank * 7 + i * 3) % 11) - 5;
    } else {
      v = static_cast<int64_t>((rank * 37 + i * 11) % 251) - 100;
    }
    setValue(b.data(), dt, i, v);
  }
  return b;
}

// The reduction over `ranks` of their inputs. Every rank thread asks for the same references, so
// each is computed once and shared.
const Bytes& expectedReduction(DataType dt, ReduceOp op, size_t count, const std::vector<int>& ranks) {
  static std::mutex mutex;
  static std::map<std::string, Bytes> cache;
  std::string key = std::to_string(int(dt)) + "/" + std::to_string(int(op)) + "/" + std::to_string(count);
  for (int r : ranks) key += "/" + std::to_string(r);
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  Bytes acc = makeInput(dt, op, count, ranks[0]);
  for (size_t k = 1; k < ranks.size(); ++k) {
    Bytes next = makeInput(dt, op, count, ranks[k]);
    reduceInto(acc.data(), next.data(), count, dt, op);
  }
  return cache.emplace(key, std::move(acc)).first->second;
}

std::string label(const Communicator& c, const char* op, size_t count, DataType dt = DataType::UInt8) {
  return std::string(op) + " size=" + std::to_string(c.size()) + " rank=" + std::to_string(c.rank()) +
         " count=" + std::to_string(count) + " dtype=" + dtypeName(dt);
}

// A count that spans several ring segments per block even with 7 ranks.
size_t bigCount(int size) { return collectives::kRingSegmentBytes / 4 * static_cast<size_t>(size) * 2 + 13; }

// ---- per-collective checks (members[i] = the id used to make rank i's data) ----------------

void checkAllreduce(Communicator& c, const std::vector<int>& members, size_t count, DataType dt,
                    ReduceOp op) {
  Bytes buf = makeInput(dt, op, count, members[c.rank()]);
  c.allreduce(buf.data(), count, dt, op);
  require(buf == expectedReduction(dt, op, count, members),
          [&] { return label(c, "allreduce", count, dt) + " op=" + reduceOpName(op) + ": wrong result"; });
}

void checkAllgatherv(Communicator& c, size_t base, bool inPlace) {
  int n = c.size(), r = c.rank();
  std::vector<size_t> bytes(n);
  for (int i = 0; i < n; ++i) bytes[i] = (i % 3 == 1) ? 0 : base + static_cast<size_t>(i) * 5;
  size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t(0));
  std::vector<size_t> at(n, 0);
  for (int i = 1; i < n; ++i) at[i] = at[i - 1] + bytes[i - 1];
  auto pattern = [](int rank, size_t i) { return static_cast<uint8_t>(rank * 29 + i * 7 + 1); };
  Bytes out(total, 0xee), in(bytes[r]);
  for (size_t i = 0; i < bytes[r]; ++i) in[i] = pattern(r, i);
  if (inPlace) {
    if (bytes[r] > 0) std::memcpy(out.data() + at[r], in.data(), bytes[r]);
    c.allgatherv(out.data() + at[r], out.data(), bytes);
  } else {
    c.allgatherv(in.data(), out.data(), bytes);
  }
  for (int j = 0; j < n; ++j) {
    bool ok = true;
    for (size_t i = 0; i < bytes[j]; ++i) ok &= out[at[j] + i] == pattern(j, i);
    require(ok, [&] { return label(c, "allgatherv", base) + ": bad block from rank " + std::to_string(j); });
  }
}

void checkBroadcast(Communicator& c, size_t bytes, int root) {
  Bytes buf(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    buf[i] = c.rank() == root ? static_cast<uint8_t>(root * 13 + i * 3) : 0xaa;
  }
  c.broadcast(buf.data(), bytes, root);
  bool ok = true;
  for (size_t i = 0; i < bytes; ++i) ok &= buf[i] == static_cast<uint8_t>(root * 13 + i * 3);
  require(ok, [&] { return label(c, "broadcast", bytes) + " root=" + std::to_string(root) + ": bad bytes"; });
}

void checkAlltoallv(Communicator& c, size_t unit) {
  int n = c.size(), r = c.rank();
  auto amount = [&](int from, int to) {
    return static_cast<size_t>((from + 2 * to) % 4) * unit + (from == to ? 1 : 0);
  };
  auto pattern = [](int from, int to, size_t i) { return static_cast<uint8_t>(from * 31 + to * 17 + i); };
  std::vector<size_t> send(n), recv(n);
  for (int j = 0; j < n; ++j) {
    send[j] = amount(r, j);
    recv[j] = amount(j, r);
  }
  Bytes in, out(std::accumulate(recv.begin(), recv.end(), size_t(0)));
  for (int j = 0; j < n; ++j) {
    for (size_t i = 0; i < send[j]; ++i) in.push_back(pattern(r, j, i));
  }
  c.alltoallv(in.data(), send, out.data(), recv);
  size_t at = 0;
  for (int j = 0; j < n; ++j) {
    bool ok = true;
    for (size_t i = 0; i < recv[j]; ++i) ok &= out[at + i] == pattern(j, r, i);
    require(ok, [&] { return label(c, "alltoallv", unit) + ": wrong bytes from rank " + std::to_string(j); });
    at += recv[j];
  }
}

void checkReduceScatter(Communicator& c, const std::vector<int>& members, size_t base, DataType dt,
                        ReduceOp op) {
  int n = c.size(), r = c.rank();
  std::vector<size_t> counts(n);
  for (int i = 0; i < n; ++i) counts[i] = i == 1 ? 0 : base + static_cast<size_t>(i) * 3;
  size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
  size_t offset = std::accumulate(counts.begin(), counts.begin() + r, size_t(0));
  Bytes in = makeInput(dt, op, total, members[r]);
  size_t es = dtypeSize(dt);
  Bytes out(counts[r] * es, 0x5a);
  c.reduceScatter(in.data(), out.data(), counts, dt, op);
  const Bytes& all = expectedReduction(dt, op, total, members);
  require(Bytes(all.begin() + offset * es, all.begin() + (offset + counts[r]) * es) == out,
          [&] { return label(c, "reducescatter", base, dt) + " op=" + reduceOpName(op) + ": wrong result"; });
  require(makeInput(dt, op, total, members[r]) == in, "reducescatter modified its input");
}

void checkSendRecv(Communicator& c, size_t bytes) {
  int n = c.size(), r = c.rank();
  int to = (r + 1) % n, from = (r - 1 + n) % n;
  Bytes out(bytes), in(bytes, 0);
  for (size_t i = 0; i < bytes; ++i) out[i] = static_cast<uint8_t>(r + i);
  c.sendRecv(to, out.data(), bytes, from, in.data(), bytes);
  bool ok = true;
  for (size_t i = 0; i < bytes; ++i) ok &= in[i] == static_cast<uint8_t>(from + i);
  require(ok, [&] { return label(c, "sendrecv", bytes) + ": wrong bytes"; });
}

void checkEverything(Communicator& c, const std::vector<int>& members) {
  const DataType kAllTypes[] = {DataType::UInt8, DataType::Int8, DataType::UInt16, DataType::Int16,
                                DataType::Int32, DataType::Int64, DataType::Float16, DataType::BFloat16,
                                DataType::Float32, DataType::Float64, DataType::Bool};
  const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};
  for (size_t count : {size_t(0), size_t(1), size_t(1001)}) {
    // Every dtype x op at the odd size; a sample at the others (each call costs log2(N) hops).
    for (DataType dt : kAllTypes) {
      for (ReduceOp op : kOps) {
        if (count == 1001 || (op == ReduceOp::Sum && (dt == DataType::Float32 || dt == DataType::Bool)) ||
            (op == ReduceOp::Max && dt == DataType::Int32)) {
          checkAllreduce(c, members, count, dt, op);
        }
      }
    }
    checkAllgatherv(c, count, false);
    checkAllgatherv(c, count, true);
    for (int root : {0, c.size() - 1, c.size() / 2}) checkBroadcast(c, count, root);
    checkAlltoallv(c, count);
    checkReduceScatter(c, members, count, DataType::Int32, ReduceOp::Sum);
    checkReduceScatter(c, members, count, DataType::Float16, ReduceOp::Max);
    checkSendRecv(c, count);
    c.barrier();
  }
  // Medium (recursive doubling just below the switch-over) and large (multi-segment ring).
  size_t justBelow = collectives::kAllreduceRingMinBytes / 4 - 1;
  checkAllreduce(c, members, justBelow, DataType::Float32, ReduceOp::Sum);
  size_t big = bigCount(c.size());
  checkAllreduce(c, members, big, DataType::Float32, ReduceOp::Sum);
  checkAllreduce(c, members, big / 2 + 1, DataType::Float16, ReduceOp::Sum);
  checkAllreduce(c, members, big / 4 + 3, DataType::Int64, ReduceOp::Max);
  checkReduceScatter(c, members, big / c.size(), DataType::Float32, ReduceOp::Sum);
  checkAllgatherv(c, collectives::kRingSegmentBytes + 77, false);
  checkBroadcast(c, collectives::kRingSegmentBytes * 3 + 5, c.size() - 1);
  checkAlltoallv(c, collectives::kRingSegmentBytes / 2 + 3);
  checkSendRecv(c, collectives::kRingSegmentBytes * 2 + 1);
  c.barrier();
}

class TcpCollectives : public ::testing::TestWithParam<int> {};

TEST_P(TcpCollectives, EveryCollectiveMatchesTheReference) {
  int n = GetParam();
  MemoryStore store;
  test::spawnRanks(n, [&](int rank) {
    Connection conn = connect(store, options(rank, n));
    require(conn.world->rank() == rank && conn.world->size() == n, "wrong rank/size");
    require(conn.world->backendName() == "tcp", "backend name");
    std::vector<int> members(n);
    std::iota(members.begin(), members.end(), 0);
    checkEverything(*conn.world, members);
  });
}

std::string ranksName(const ::testing::TestParamInfo<int>& info) { return std::to_string(info.param); }
INSTANTIATE_TEST_SUITE_P(Ranks, TcpCollectives, ::testing::Values(1, 2, 3, 4, 7), ranksName);

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
      require(std::memcmp(buf.data(), expected.data(), count * sizeof(float)) == 0,
              [&] { return "rank " + std::to_string(rank) + " of " + std::to_string(n) + ": not the rank-order sum"; });
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
    checkAllreduce(*sub, mine, bigCount(sub->size()), DataType::Int32, ReduceOp::Sum);
    checkAllgatherv(*sub, 333, false);
    checkBroadcast(*sub, 4096, sub->size() - 1);
    checkReduceScatter(*sub, mine, 100, DataType::Float64, ReduceOp::Min);
    checkAlltoallv(*sub, 50);
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
    require(refused([&] { c.allreduce(&x, 1, DataType::Float32, ReduceOp::Average); }), "average refused");
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
  test::spawnRanks(n, [&](int rank) {
    if (rank == 2) {  // arrives only after the strangers had their go at rank 1
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return strangersDone; });
    }
    Connection conn = connect(store, options(rank, n));
    checkAllreduce(*conn.world, {0, 1, 2}, 1001, DataType::Float32, ReduceOp::Sum);
  });
  stranger.join();
  EXPECT_EQ(outcomes, (std::vector<std::string>{"garbage dropped", "wrong secret refused"}));
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
      size_t count = large ? bigCount(n) : 100;
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
    conn.world->barrier();
    if (rank == 0) {
      for (int r = 1; r < n; ++r) ch.send(r, "while spinning");
    } else {
      while (got.empty()) ch.poll(got, 5000ms, Micros(1000000));
      require(got[0].from == 0 && got[0].bytes == "while spinning", "message seen while spinning");
    }
    conn.world->barrier();
    // A peer that goes away makes rank 0's poll fail naming it. Ranks 1 and 2 stay connected
    // until rank 0 has seen that.
    if (rank == 3) {
      conn.control.reset();
      return;
    }
    if (rank == 0) {
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
