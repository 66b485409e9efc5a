// A rendezvous store that fails under a waiting rank: the error keeps its class and the store's
// own text, and adds who serves the store and which ranks the rank was waiting for, so that it
// names ranks (core/transport/rendezvous_store.h). The stores here are real TCP stores stopped
// while a rank waits on them, as when rank 0 of a job without a launcher exits.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/common/errors.h"
#include "core/net/socket.h"
#include "core/runtime.h"
#include "core/store/memory_store.h"
#include "core/store/tcp_store.h"
#include "core/transport/rendezvous_store.h"
#include "core/transport/transport.h"
#include "tests/cpp/connect_options.h"
#include "tests/cpp/counting_store.h"

namespace hora {
namespace {

using namespace std::chrono_literals;

const char kSecret[] = "rendezvous-store-test";

// A store that tells the test when a rank first calls `watched` on `key`, then does the call.
class WatchedStore : public Store {
 public:
  WatchedStore(Store& inner, std::string watched, std::string key)
      : inner_(inner), watched_(std::move(watched)), key_(std::move(key)) {}

  void set(const std::string& key, const std::string& value) override { inner_.set(key, value); }
  std::string get(const std::string& key, Millis timeout) override {
    seen("get", key);
    return inner_.get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return inner_.add(key, delta); }
  bool check(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) seen("check", k);
    return inner_.check(keys);
  }
  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    inner_.wait(keys, timeout);
  }
  std::vector<std::optional<std::string>> getMany(const std::vector<std::string>& keys,
                                                  Millis timeout) override {
    // Only a getMany that waits: a look (timeout 0) comes first and is over at once.
    if (timeout > Millis(0)) {
      for (const auto& k : keys) seen("getMany", k);
    }
    return inner_.getMany(keys, timeout);
  }

  // Blocks until the watched call was made (bounded: the test fails, never hangs).
  bool awaitCall() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 30s, [&] { return called_; });
  }

 private:
  void seen(const std::string& call, const std::string& key) {
    if (call != watched_ || key != key_) return;
    std::lock_guard<std::mutex> lock(mu_);
    called_ = true;
    cv_.notify_all();
  }

  Store& inner_;
  std::string watched_, key_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool called_ = false;
};

ConnectOptions options(int rank, int size, StoreOwner owner) {
  // A TimeoutError would come only after this bound: the store fails first.
  ConnectOptions o = test::loopbackOptions(rank, size, kSecret, 60000ms);
  o.storeOwner = owner;
  return o;
}

int unusedPort() {
  int port = 0;
  net::Socket s = net::listenOn("127.0.0.1", 0, &port);
  return port;  // closed again when s goes: nothing listens there
}

// Runs rank `rank` of a `size`-rank TCP connect against a real store, stops the store once the
// rank made the watched call, and returns the error the rank got (IoError expected).
std::string errorWhenTheStoreStops(int rank, int size, StoreOwner owner,
                                   const std::function<void(Store&)>& others,
                                   const std::string& watched, const std::string& key) {
  TcpStoreServer server("127.0.0.1", 0, kSecret);
  TcpStoreClient othersClient("127.0.0.1", server.port(), kSecret, 10000ms);
  others(othersClient);
  TcpStoreClient client("127.0.0.1", server.port(), kSecret, 10000ms);
  WatchedStore store(client, watched, key);
  std::string message = "no IoError";
  std::thread waiter([&] {
    try {
      makeTransport("tcp")->connect(options(rank, size, owner), store);
    } catch (const IoError& e) {
      message = e.what();
    } catch (const std::exception& e) {
      message = std::string("another error: ") + e.what();
    }
  });
  bool called = store.awaitCall();
  server.stop();
  waiter.join();
  EXPECT_TRUE(called) << "the rank never made the watched call: " << message;
  return message;
}

TEST(RendezvousStore, RankWaitingForAnAddressNamesTheMissingRankAndRank0) {
  // Rank 0 (which serves the store) has published its address; rank 1 never starts; rank 2
  // waits for rank 1's address when rank 0 stops serving.
  auto rank0Published = [](Store& s) {
    s.set("addr/0", "127.0.0.1:" + std::to_string(unusedPort()));
  };
  std::string m =
      errorWhenTheStoreStops(2, 3, StoreOwner::Rank0, rank0Published, "getMany", "addr/1");
  EXPECT_NE(m.find("rank 2: the rendezvous store, served by rank 0, failed while this rank was "
                   "waiting for rank(s) 1 to publish their address: store at 127.0.0.1:"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find("rank(s) 0"), std::string::npos) << m;  // rank 0's address had arrived
  EXPECT_NE(m.find("see rank 0's output"), std::string::npos) << m;
}

TEST(RendezvousStore, RankConnectingToPeersNamesThemAndTheLauncher) {
  // Every address is there, but no peer ever answers: rank 2 is connecting when the store stops.
  // At set-up it connects to rank 0 only (its control connection; data links open on first use).
  auto published = [](Store& s) {
    for (int r = 0; r < 2; ++r) {
      s.set("addr/" + std::to_string(r), "127.0.0.1:" + std::to_string(unusedPort()));
    }
  };
  std::string m = errorWhenTheStoreStops(2, 3, StoreOwner::Launcher, published, "check", "addr/2");
  EXPECT_NE(m.find("rank 2: the rendezvous store, served by the launcher, failed while this rank "
                   "was waiting for rank(s) 0 to connect: store at 127.0.0.1:"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("a newer generation of an elastic job"), std::string::npos) << m;
}

// Rank 1 of 2 starting against the store at 127.0.0.1:port, served by `owner`.
RuntimeOptions rankOneOf(int port, StoreOwner owner, double startTimeoutSeconds) {
  RuntimeOptions o;
  o.topology.rank = 1;
  o.topology.size = 2;
  o.storeHost = "127.0.0.1";
  o.storePort = port;
  o.storeOwner = owner;
  o.secret = kSecret;
  o.listenHost = "127.0.0.1";
  o.settings.startTimeoutSeconds = startTimeoutSeconds;
  return o;
}

TEST(RendezvousStore, UnreachableStoreOfRank0IsNamedAtStart) {
  std::string m = "no IoError";
  try {
    Runtime::start(rankOneOf(unusedPort(), StoreOwner::Rank0, 0.3));
  } catch (const IoError& e) {
    m = e.what();
  }
  EXPECT_NE(m.find("rank 1: the rendezvous store, served by rank 0, failed while this rank was "
                   "connecting to it: store at 127.0.0.1:"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("unreachable"), std::string::npos) << m;
}

TEST(RendezvousStore, AStoreWithAnotherSecretRefusesTheRankWithoutBlamingTheLauncher) {
  TcpStoreServer server("127.0.0.1", 0, "the launcher's secret");
  std::string m = "no AuthenticationError";
  try {
    Runtime::start(rankOneOf(server.port(), StoreOwner::Launcher, 5));
  } catch (const AuthenticationError& e) {
    m = e.what();
  }
  EXPECT_NE(m.find("rank 1: the rendezvous store, served by the launcher, refused this rank while "
                   "it was connecting to it: store at 127.0.0.1:"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("is the secret the same on every rank?"), std::string::npos) << m;
  EXPECT_EQ(m.find("stopped the job"), std::string::npos) << m;  // it did not
}

TEST(RendezvousStore, AwaitRanksReturnsValuesInOrderAndNamesEveryMissingRankAtTheDeadline) {
  MemoryStore store;
  auto keyOf = [](int r) { return "k/" + std::to_string(r); };
  store.set("k/0", "a");
  store.set("k/2", "c");
  ConnectOptions o = options(5, 6, StoreOwner::Rank0);
  o.startTimeout = 50ms;
  std::string m = "no TimeoutError";
  try {
    awaitRanks(o, store, {0, 1, 2, 3}, keyOf, Clock::now() + o.startTimeout, "say hello");
  } catch (const TimeoutError& e) {
    m = e.what();
  }
  EXPECT_NE(m.find("rank 5: timed out after 50 ms waiting for rank(s) 1, 3 to say hello"),
            std::string::npos)
      << m;
  store.set("k/1", "b");
  EXPECT_EQ(awaitRanks(o, store, {2, 0, 1}, keyOf, Clock::now(), "say hello"),
            (std::vector<std::string>{"c", "a", "b"}));
}

// Every rank awaits every rank's key at start-up (hosts, shared-memory attachment): one request
// asks for all the keys still missing, so a rank asks a few times, not once per rank.
TEST(RendezvousStore, AwaitingManyRanksTakesAFewRequestsNotOnePerRank) {
  MemoryStore shared;
  test::CountingStore store(shared);
  auto keyOf = [](int r) { return "k/" + std::to_string(r); };
  const int n = 100;
  for (int r = 0; r < n; ++r) {
    if (r % 10 != 3) shared.set(keyOf(r), std::to_string(r));
  }
  std::thread late([&] {  // the last ranks arrive while the others are awaited
    std::this_thread::sleep_for(50ms);
    for (int r = 3; r < n; r += 10) shared.set(keyOf(r), std::to_string(r));
  });
  std::vector<int> everyone;
  for (int r = 0; r < n; ++r) everyone.push_back(r);
  ConnectOptions o = options(0, n, StoreOwner::Launcher);
  std::vector<std::string> values =
      awaitRanks(o, store, everyone, keyOf, Clock::now() + 10000ms, "say hello");
  late.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(values[r], std::to_string(r));
  // A look at what is there, then one wait for the ten still missing (a wait per second more
  // only on a machine so slow that they take longer).
  EXPECT_LE(store.requests(), 4) << "requests for " << n << " ranks";
}

// A store failure of the class TimeoutError (a store that stopped answering) stays a
// TimeoutError, with the same context.
TEST(RendezvousStore, FailureKeepsItsClass) {
  ConnectOptions o = options(3, 4, StoreOwner::Launcher);
  EXPECT_THROW(storeCall(o, "publishing its address",
                         []() -> int { throw TimeoutError("store at h:1: timed out sending"); }),
               TimeoutError);
  EXPECT_THROW(storeCall(o, "publishing its address",
                         []() -> int { throw IoError("store at h:1: connection closed"); }),
               IoError);
  EXPECT_EQ(storeCall(o, "publishing its address", [] { return 7; }), 7);
}

}  // namespace
}  // namespace hora
