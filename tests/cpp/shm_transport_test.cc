// The shared-memory transport with N ranks as threads of this process over a MemoryStore: what is
// particular to shared memory (the segment's size, name and descriptors, set-up refusing strangers
// and honouring HORA_SHM_DISABLE, peers that leave or stay silent, the three-stage wait). Every
// collective against its reference, at every size, dtype and op, runs in
// collective_matrix_test.cc (Shm/...); a rank killed with SIGKILL in another process is
// tests/single/test_shm_faults.py.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/common/errors.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/store/memory_store.h"
#include "core/transport/backends.h"
#include "core/transport/shm/links.h"
#include "core/transport/shm/segment.h"
#include "core/transport/shm/setup.h"
#include "core/transport/shm/transport.h"
#include "core/transport/shm/wait.h"
#include "tests/cpp/connect_options.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

using namespace std::chrono_literals;

ConnectOptions options(int rank, int size) {
  return test::loopbackOptions(rank, size, "shm-transport-test");
}

Connection connectShm(Store& store, const ConnectOptions& o) {
  return makeTransport("shm")->connect(o, store);
}

template <typename Message>
void require(bool ok, Message&& what) {
  if (!ok) throw std::runtime_error(what());
}
void require(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(what);
}

// Sizes of this process's mappings of hora segments (one line of /proc/self/maps each).
std::vector<size_t> segmentMappings() {
  std::vector<size_t> sizes;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("memfd:hora-shm") == std::string::npos) continue;
    size_t dash = line.find('-'), space = line.find(' ');
    size_t lo = std::stoull(line.substr(0, dash), nullptr, 16);
    size_t hi = std::stoull(line.substr(dash + 1, space - dash - 1), nullptr, 16);
    sizes.push_back(hi - lo);
  }
  return sizes;
}

// Open descriptors of this process that are hora segments.
int segmentDescriptors() {
  int found = 0;
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  while (dirent* e = ::readdir(d)) {
    char target[256] = {};
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    if (::readlink(path.c_str(), target, sizeof(target) - 1) > 0 &&
        std::strstr(target, "memfd:hora-shm")) {
      ++found;
    }
  }
  ::closedir(d);
  return found;
}

// Entries of /dev/shm whose name mentions hora.
int horaFilesInDevShm() {
  int found = 0;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      if (std::strstr(e->d_name, "hora")) ++found;
    }
    ::closedir(d);
  }
  return found;
}

TEST(ShmTransport, RegistryNamesAndBackend) {
  EXPECT_EQ(makeTransport("shm")->name(), "shm");
  EXPECT_TRUE(transportBuilt("shm"));
  MemoryStore store;
  test::spawnRanks(2, [&](int rank) {
    Connection c = connectShm(store, options(rank, 2));
    require(c.world->backendName() == "shm", "world is not shm");
    require(c.world->subset({rank})->backendName() == "shm", "subset is not shm");
  });
}

TEST(ShmTransport, SegmentIsBoundedNamelessAndGoneWithTheRanks) {
  const int n = 3;
  const size_t ring = 4096, window = 4096;
  const int devShmBefore = horaFilesInDevShm();
  MemoryStore store;
  std::vector<Connection> conns(n);
  test::spawnRanks(n, [&](int rank) {
    ConnectOptions o = options(rank, n);
    o.shmRingBytes = ring;
    o.shmWindowBytes = window;
    conns[rank] = connectShm(store, o);
    // 8 MiB per rank through 4 KiB rings and 4 KiB windows: the segment does not grow with the
    // message (the window's allreduce, then a subset's, which goes through the rings).
    const size_t count = 2 << 20;
    std::vector<float> buf(count, static_cast<float>(rank + 1));
    conns[rank].world->allreduce(buf.data(), count, DataType::Float32, ReduceOp::Sum);
    for (size_t i = 0; i < count; i += 4099) require(buf[i] == 6.0f, "wrong sum");
    if (rank < 2) {
      conns[rank].world->subset({0, 1})->allreduce(buf.data(), count, DataType::Float32,
                                                   ReduceOp::Sum);
      for (size_t i = 0; i < count; i += 4099) require(buf[i] == 12.0f, "wrong subset sum");
    }
  });
  const size_t expected = shm::Segment::bytesFor(n, ring, window);
  auto mappings = segmentMappings();
  ASSERT_EQ(mappings.size(), static_cast<size_t>(n));
  for (size_t m : mappings) EXPECT_EQ(m, (expected + 4095) / 4096 * 4096);
  EXPECT_EQ(segmentDescriptors(), 0);  // every rank closed its descriptor after mapping
  EXPECT_EQ(horaFilesInDevShm(), devShmBefore);
  conns.clear();
  EXPECT_TRUE(segmentMappings().empty());
}

TEST(ShmTransport, PeerThatLeavesFailsOthersQuicklyWithIoError) {
  for (bool large : {false, true}) {
    const int n = 3;
    MemoryStore store;
    test::spawnRanks(n, [&](int rank) {
      ConnectOptions o = options(rank, n);
      o.opTimeout = 20000ms;  // far longer than the test may take: only the leaving can end it
      Connection conn = connectShm(store, o);
      conn.world->barrier();
      if (rank == 2) return;  // leaves the group
      size_t count = large ? (1 << 20) : 3;
      std::vector<float> buf(count, 1.0f);
      auto start = Clock::now();
      std::string message;
      try {
        conn.world->allreduce(buf.data(), count, DataType::Float32, ReduceOp::Sum);
      } catch (const IoError& e) {
        message = e.what();
      }
      require(message.find("rank 2") != std::string::npos,
              [&] { return "expected IoError naming rank 2, got: " + message; });
      require(Clock::now() - start < 5000ms, "IoError took too long");
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

TEST(ShmTransport, SilentPeerTimesOutNamingIt) {
  MemoryStore store;
  std::string message;
  std::mutex m;
  std::condition_variable cv;
  bool rank0Done = false;
  test::spawnRanks(2, [&](int rank) {
    ConnectOptions o = options(rank, 2);
    o.opTimeout = 300ms;
    Connection conn = connectShm(store, o);
    conn.world->barrier();
    if (rank == 1) {  // attached, alive, but never joins the collective
      std::unique_lock<std::mutex> lock(m);
      cv.wait_for(lock, 5000ms, [&] { return rank0Done; });
      return;
    }
    float x = 1;
    try {
      conn.world->allreduce(&x, 1, DataType::Float32, ReduceOp::Sum);
    } catch (const TimeoutError& e) {
      message = e.what();
    }
    std::lock_guard<std::mutex> lock(m);
    rank0Done = true;
    cv.notify_all();
  });
  EXPECT_NE(message.find("rank 1"), std::string::npos) << message;
  EXPECT_NE(message.find("HORA_TIMEOUT_SECONDS"), std::string::npos) << message;
}

TEST(ShmSetup, DisabledOnAnyRankKeepsTcpOnEveryRank) {
  MemoryStore store;
  test::spawnRanks(3, [&](int rank) {
    ConnectOptions o = options(rank, 3);
    Connection c = makeTransport("tcp")->connect(o, store);
    bool used = shm::preferSharedMemory(c, o, store, /*disabled=*/rank == 1);
    require(!used && c.world->backendName() == "tcp", "shared memory was used although disabled");
    int x = rank;
    c.world->allreduce(&x, 1, DataType::Int32, ReduceOp::Sum);
    require(x == 3, "wrong sum over TCP");
  });
  MemoryStore store2;
  test::spawnRanks(3, [&](int rank) {
    ConnectOptions o = options(rank, 3);
    Connection c = makeTransport("tcp")->connect(o, store2);
    require(shm::preferSharedMemory(c, o, store2, false), "shared memory was not used");
    require(c.world->backendName() == "shm", "world is not shm");
  });
}

// A Store that runs a hook before every get() (and getMany(), per key), so a test can hold one rank
// at a chosen key.
class GatedStore : public Store {
 public:
  GatedStore(Store& inner, std::function<void(const std::string&)> beforeGet)
      : inner_(inner), beforeGet_(std::move(beforeGet)) {}
  void set(const std::string& k, const std::string& v) override { inner_.set(k, v); }
  std::string get(const std::string& k, Millis timeout) override {
    beforeGet_(k);
    return inner_.get(k, timeout);
  }
  int64_t add(const std::string& k, int64_t d) override { return inner_.add(k, d); }
  bool check(const std::vector<std::string>& keys) override { return inner_.check(keys); }
  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    inner_.wait(keys, timeout);
  }
  std::vector<std::optional<std::string>> getMany(const std::vector<std::string>& keys,
                                                  Millis timeout) override {
    for (const auto& k : keys) beforeGet_(k);
    return inner_.getMany(keys, timeout);
  }

 private:
  Store& inner_;
  std::function<void(const std::string&)> beforeGet_;
};

TEST(ShmSetup, StrangerWithoutTheSecretGetsNoDescriptor) {
  MemoryStore store;
  std::mutex m;
  std::condition_variable cv;
  bool strangerDone = false;
  std::string strangerResult = "did not run";
  // Rank 1 asks for rank 0's socket only after the stranger has tried it, so rank 0 is serving.
  GatedStore gated(store, [&](const std::string& key) {
    if (key != "shm/addr") return;
    std::unique_lock<std::mutex> lock(m);
    cv.wait_for(lock, 10000ms, [&] { return strangerDone; });
  });
  test::spawnRanks(3, [&](int who) {
    if (who == 2) {  // the stranger: knows the socket name, not the secret
      try {
        std::string name = store.get("shm/addr", 10000ms);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        std::memcpy(a.sun_path + 1, name.data(), name.size());
        socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
        net::Socket s(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0));
        if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&a), len) != 0) {
          strangerResult = "could not connect";
        } else {
          auto hs = net::Handshake::connector("wrong secret", net::PeerKind::Data, 1, 0);
          try {
            net::runHandshake(s.fd(), hs, Clock::now() + 5000ms, "stranger");
            strangerResult = "handshake passed";
          } catch (const IoError& e) {
            strangerResult = std::string("refused: ") + e.what();
          }
        }
      } catch (const std::exception& e) {
        strangerResult = e.what();
      }
      std::lock_guard<std::mutex> lock(m);
      strangerDone = true;
      cv.notify_all();
      return;
    }
    ConnectOptions o = options(who, 2);
    shm::Attachment a =
        shm::attachJob(o, who == 1 ? static_cast<Store&>(gated) : store, false, 4096);
    require(a.peers != nullptr, [&] { return "set-up failed: " + a.whyNot; });
  });
  EXPECT_EQ(strangerResult.rfind("refused", 0), 0u) << strangerResult;
}

// Tensors the runtime would fuse reach the window unfused, as pieces: each piece gets its part of
// the result, a piece without data counts as zeros, and a float sum is the rank-ordered fold,
// bit for bit (these values round differently in any other order). Windows of 256 bytes hold 32
// floats per part, so pieces straddle parts; one piece is larger than a shared payload, so that
// the whole goes to the window.
TEST(ShmWindow, PiecesGetTheRankOrderedFoldOfTheirPart) {
  const int n = 3;
  const std::vector<size_t> sizes{5, 0, 7, 2100, 1};
  auto value = [](int r, size_t i) {
    float big = 1e8f * static_cast<float>(1 + i % 3);
    return r == 0 ? big : r == 1 ? -big : 1.5f + static_cast<float>(i);
  };
  // Rank 1 gives no data for piece 2 (as the runtime does for a joined rank).
  auto present = [](int r, size_t piece) { return !(r == 1 && piece == 2); };
  MemoryStore store;
  std::vector<Connection> conns(n);
  test::spawnRanks(n, [&](int rank) {
    ConnectOptions o = options(rank, n);
    o.shmWindowBytes = 256;
    conns[rank] = connectShm(store, o);
    Communicator& c = *conns[rank].world;
    std::vector<std::vector<float>> data;
    std::vector<BufferPiece> pieces;
    size_t count = 0, at = 0;
    for (size_t p = 0; p < sizes.size(); ++p) {
      data.emplace_back(sizes[p]);
      for (size_t i = 0; i < sizes[p]; ++i) data[p][i] = value(rank, at + i);
      pieces.push_back({present(rank, p) ? data[p].data() : nullptr, sizes[p] * sizeof(float)});
      count += sizes[p];
      at += sizes[p];
    }
    // Both halves of every window hold other data first, which a piece without data must not
    // bring back.
    std::vector<float> before(2100, 7.0f);
    c.allreduce(before.data(), before.size(), DataType::Float32, ReduceOp::Sum);
    require(c.reducesPieces(count, DataType::Float32, ReduceOp::Sum), "pieces refused");
    require(!c.reducesPieces(2048, DataType::Float32, ReduceOp::Sum),
            "a shared payload went to the window");
    c.allreducePieces(pieces, count, DataType::Float32, ReduceOp::Sum);
    at = 0;
    for (size_t p = 0; p < sizes.size(); at += sizes[p], ++p) {
      if (!present(rank, p)) continue;
      for (size_t i = 0; i < sizes[p]; ++i) {
        float want = value(0, at + i);
        for (int r = 1; r < n; ++r) want += present(r, p) ? value(r, at + i) : 0.0f;
        require(data[p][i] == want, [&] {
          return "rank " + std::to_string(rank) + " piece " + std::to_string(p) + " element " +
                 std::to_string(i) + ": " + std::to_string(data[p][i]) +
                 " != " + std::to_string(want);
        });
      }
    }
  });
}

// A host's own segment of the hierarchical path numbers its ranks by their index on the host;
// what a rank reports names its peers by their rank in the job.
TEST(ShmPeers, NamesPeersByTheirRankInTheJob) {
  shm::Segment segment = shm::Segment::create(2, 4096);
  segment.rank(1).identity.gone.store(1);
  shm::ShmPeers peers(std::move(segment), 0, shm::WaitPolicy{});
  EXPECT_NE(peers.peerGone(1).find("rank 1 left"), std::string::npos) << peers.peerGone(1);
  peers.jobRanks = {4, 7};
  EXPECT_NE(peers.peerGone(1).find("rank 7 left"), std::string::npos) << peers.peerGone(1);
}

TEST(ShmWait, APeerThatLeftAfterPublishingDoesNotFailTheWait) {
  shm::Doorbell bell{};
  shm::WaitPolicy policy;
  policy.pause = 0us;
  policy.yield = 0us;
  policy.timeout = 5000ms;
  // The condition turns true only once the failure check has seen the peer gone, as when a peer
  // publishes its last bytes and leaves between the waiter's two looks.
  bool gone = false;
  bool ok = shm::waitUntil(
      bell, policy, [&] { return gone; },
      [&] {
        gone = true;
        return std::string("rank 1 left");
      });
  EXPECT_TRUE(ok);
}

TEST(ShmWait, WakesOnRingFailsOnReasonAndTimesOut) {
  shm::Doorbell bell{};
  shm::WaitPolicy policy;
  policy.pause = 0us;
  policy.yield = 0us;
  policy.timeout = 5000ms;
  std::atomic<bool> flag{false};
  std::thread publisher([&] {
    std::this_thread::sleep_for(30ms);  // the waiter is asleep in the futex by then
    flag = true;
    shm::ring(bell);
  });
  bool ok = shm::waitUntil(
      bell, policy, [&] { return flag.load(); }, [] { return std::string(); });
  publisher.join();
  EXPECT_TRUE(ok);
  EXPECT_EQ(bell.sleepers.load(), 0u);

  EXPECT_THROW(shm::waitUntil(
                   bell, policy, [] { return false; }, [] { return std::string("peer gone"); }),
               IoError);
  policy.timeout = 50ms;
  EXPECT_FALSE(shm::waitUntil(
      bell, policy, [] { return false; }, [] { return std::string(); }));
}

}  // namespace
}  // namespace hora
