// The TCP control plane as a tree (core/transport/tcp/control_tree.h): ranks are threads of this
// process connected over loopback with HORA_CONTROL_FANOUT's option forced small, so that ranks
// relay. Messages keep their true origin and their order per sender, a broadcast reaches every
// rank once, rank 0 holds only `fanout` control connections, a relay that closes fails both its
// parent and its children naming it, and up to fanout + 1 ranks the wire is the star's.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/common/errors.h"
#include "core/common/settings.h"
#include "core/net/socket.h"
#include "core/store/memory_store.h"
#include "core/transport/control_frames.h"
#include "core/transport/tcp/control_channel.h"
#include "core/transport/tcp/control_tree.h"
#include "core/transport/transport.h"
#include "tests/cpp/connect_options.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

using namespace std::chrono_literals;
using Messages = std::vector<ControlChannel::Message>;

const char kSecret[] = "tcp-control-tree-test";

Connection connectTree(Store& store, int rank, int size, int fanout) {
  ConnectOptions o = test::loopbackOptions(rank, size, kSecret);
  o.controlFanout = fanout;
  return makeTransport("tcp")->connect(o, store);
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// Polls until a message arrives (relaying meanwhile) and returns it; the bound is the test's.
ControlChannel::Message next(ControlChannel& ch, Messages& pending) {
  auto deadline = Clock::now() + 10s;
  while (pending.empty()) {
    require(Clock::now() < deadline, "rank " + std::to_string(ch.rank()) + ": nothing arrived");
    ch.poll(pending, 1000ms);
  }
  ControlChannel::Message m = std::move(pending.front());
  pending.erase(pending.begin());
  return m;
}

TEST(ControlTree, ShapeOfTheTree) {
  tcp::ControlTree tree(7, 2);
  EXPECT_EQ(tree.parent(0), -1);
  EXPECT_EQ(tree.parent(4), 1);
  EXPECT_EQ(tree.parent(5), 2);
  EXPECT_EQ(tree.children(1), (std::vector<int>{3, 4}));
  EXPECT_EQ(tree.children(2), (std::vector<int>{5, 6}));
  EXPECT_TRUE(tree.children(3).empty());
  EXPECT_EQ(tree.childToward(0, 6), 2);
  EXPECT_EQ(tree.childToward(0, 1), 1);
  EXPECT_EQ(tree.childToward(1, 5), -1);  // not below rank 1
  EXPECT_TRUE(tree.inSubtree(1, 4));
  EXPECT_FALSE(tree.inSubtree(1, 5));
  EXPECT_FALSE(tree.inSubtree(1, 7));  // would hang below rank 3, but the world has 7 ranks
  EXPECT_FALSE(tree.inSubtree(0, -1));
  EXPECT_EQ(tree.depth(6), 2);
  // Up to fanout + 1 ranks, every rank is a child of rank 0: the star.
  tcp::ControlTree star(33, 32);
  for (int r = 1; r < 33; ++r) EXPECT_EQ(star.parent(r), 0);
  EXPECT_THROW(tcp::ControlTree(4, 0), InvalidArgument);
}

// HORA_CONTROL_FANOUT: 32 by default, at least 1.
TEST(ControlTree, TheFanoutSetting) {
  ::unsetenv("HORA_CONTROL_FANOUT");
  EXPECT_EQ(Settings::fromEnvironment().controlFanout, tcp::kDefaultControlFanout);
  ::setenv("HORA_CONTROL_FANOUT", "2", 1);
  EXPECT_EQ(Settings::fromEnvironment().controlFanout, 2);
  ::setenv("HORA_CONTROL_FANOUT", "0", 1);
  EXPECT_THROW(Settings::fromEnvironment(), InvalidArgument);
  ::unsetenv("HORA_CONTROL_FANOUT");
}

// Seven ranks, fanout 2: 0 -> {1, 2}, 1 -> {3, 4}, 2 -> {5, 6}. Every worker sends a run of
// numbered messages up; rank 0 answers each worker down its subtree and broadcasts; the workers
// confirm, and a final broadcast lets the relays stop relaying.
TEST(TcpControlTree, RoutesWithTrueOriginsInOrderAndBroadcastsOnce) {
  const int n = 7, fanout = 2, perRank = 50;
  MemoryStore store;
  test::spawnRanks(n, [&](int rank) {
    Connection conn = connectTree(store, rank, n, fanout);
    ControlChannel& ch = *conn.control;
    auto& tcp = dynamic_cast<tcp::TcpControlChannel&>(ch);
    const int expectLinks = rank == 0 ? 2 : (rank <= 2 ? 3 : 1);
    // Silence between rank 0 and rank 3 may be relay 1's (peer_watch names it).
    require(ch.relays(rank == 0 ? 3 : 0) == (rank == 0 || rank == 3 || rank == 4 ? "1" : "") ||
                (rank >= 5 && ch.relays(0) == "2"),
            "rank " + std::to_string(rank) + ": relays '" + ch.relays(rank == 0 ? 3 : 0) + "'");
    require(tcp.connections() == expectLinks, "rank " + std::to_string(rank) + " holds " +
                                                  std::to_string(tcp.connections()) +
                                                  " control connections");
    Messages pending;
    if (rank == 0) {
      std::map<int, int> seen;  // next number expected from each rank
      for (int i = 0; i < (n - 1) * perRank; ++i) {
        auto m = next(ch, pending);
        require(m.from >= 1 && m.from < n, "origin " + std::to_string(m.from));
        require(m.bytes == std::to_string(m.from) + ":" + std::to_string(seen[m.from]),
                "from " + std::to_string(m.from) + " got '" + m.bytes + "' out of order");
        ++seen[m.from];
      }
      for (int r = 1; r < n; ++r) ch.send(r, "to " + std::to_string(r));
      ch.broadcast("everyone");
      for (int i = 1; i < n; ++i) {
        auto m = next(ch, pending);
        require(m.bytes == "done " + std::to_string(m.from), "done: " + m.bytes);
      }
      ch.broadcast("finish");
      return;
    }
    for (int i = 0; i < perRank; ++i) ch.send(0, std::to_string(rank) + ":" + std::to_string(i));
    auto mine = next(ch, pending);
    require(mine.from == 0 && mine.bytes == "to " + std::to_string(rank), "got " + mine.bytes);
    auto all = next(ch, pending);
    require(all.from == 0 && all.bytes == "everyone", "broadcast: " + all.bytes);
    ch.send(0, "done " + std::to_string(rank));
    // Nothing else comes before the final broadcast: the first one arrived exactly once, and no
    // frame meant for another rank reached this one's caller.
    auto last = next(ch, pending);
    require(last.from == 0 && last.bytes == "finish", "expected finish, got " + last.bytes);
    require(pending.empty(), "an extra message");
  });
}

// A chain (fanout 1: 0 - 1 - 2 - 3): rank 0 sends rank 3 a message far larger than the sockets'
// buffers while rank 3 and relay 1 send theirs to rank 0, all at once, so that each sender waits
// for room while the ranks around it read, pass on and wait for room themselves (rank 0 and
// rank 1 each write to the other). Nobody reads until its own send is done.
TEST(TcpControlTree, LargeMessagesCrossThroughRelaysBothWaysAtOnce) {
  const int n = 4, fanout = 1;
  MemoryStore store;
  test::spawnRanks(n, [&](int rank) {
    Connection conn = connectTree(store, rank, n, fanout);
    ControlChannel& ch = *conn.control;
    Messages pending;
    const std::string up(16 << 20, 'u'), mid(16 << 20, 'm'), down(16 << 20, 'd');
    if (rank == 0) {
      ch.send(3, down);
      std::map<int, std::string> got;
      for (int i = 0; i < 2; ++i) {
        auto m = next(ch, pending);
        got[m.from] = std::move(m.bytes);
      }
      require(got[3] == up && got[1] == mid, "rank 0: the large messages of ranks 1 and 3");
      ch.broadcast("finish");
    } else if (rank == 3) {
      ch.send(0, up);
      auto m = next(ch, pending);
      require(m.from == 0 && m.bytes == down, "rank 3: the large message from rank 0");
      require(next(ch, pending).bytes == "finish", "finish");
    } else {
      if (rank == 1) ch.send(0, mid);
      auto m = next(ch, pending);  // the relays relay until the end
      require(m.from == 0 && m.bytes == "finish", "relay got " + m.bytes.substr(0, 20));
    }
  });
}

// A relay's caller may stop polling as soon as it has its own message (its next collective may
// wait on the ranks below it): by then every frame the relay passes on is written. Rank 0 sends
// rank 2 a message larger than the sockets' buffers, then a broadcast; relay 1 (fanout 1: the
// chain 0 - 1 - 2) stops polling once it has the broadcast, and rank 2 must still get it all.
TEST(TcpControlTree, ARelaysPollReturnsOnlyOnceWhatItRelaysIsWritten) {
  const int n = 3, fanout = 1;
  MemoryStore store;
  std::mutex mutex;
  std::condition_variable cv;
  bool rank2Done = false;
  test::spawnRanks(n, [&](int rank) {
    Connection conn = connectTree(store, rank, n, fanout);
    ControlChannel& ch = *conn.control;
    Messages pending;
    const std::string big(32 << 20, 'b');
    if (rank == 0) {
      ch.send(2, big);
      ch.broadcast("after");
    } else if (rank == 1) {
      require(next(ch, pending).bytes == "after", "relay: the broadcast");
    } else {
      auto m = next(ch, pending);
      require(m.from == 0 && m.bytes == big, "rank 2: the large message");
      require(next(ch, pending).bytes == "after", "rank 2: the broadcast");
    }
    // Nobody polls from here on until rank 2 is done (the relay least of all).
    std::unique_lock<std::mutex> lock(mutex);
    if (rank == 2) rank2Done = true;
    cv.notify_all();
    cv.wait_for(lock, 20s, [&] { return rank2Done; });
  });
}

// Rank 0 tells every rank to stop and closes at once, as a shutdown does. A relay (chain 0 - 1 -
// 2) that sees the hang-up while it still holds what came before it (rank 2 reads nothing until
// rank 0 is gone) passes all of that on first, and only its next poll fails, naming rank 0;
// rank 2 gets everything, then fails naming rank 1 once that closes too.
TEST(TcpControlTree, AParentsLastWordsPassOnBeforeItsHangUpFailsTheRelay) {
  const int n = 3, fanout = 1;
  MemoryStore store;
  std::mutex mutex;
  std::condition_variable cv;
  bool rank0Gone = false;
  test::spawnRanks(n, [&](int rank) {
    Connection conn = connectTree(store, rank, n, fanout);
    ControlChannel& ch = *conn.control;
    Messages pending;
    const std::string big(48 << 20, 'b');  // more than both sockets' buffers hold
    auto failsNaming = [&](const std::string& who) {
      try {
        for (int i = 0; i < 20; ++i) ch.poll(pending, 500ms);
      } catch (const IoError& e) {
        return std::string(e.what()).find("control connection to " + who) != std::string::npos;
      }
      return false;
    };
    if (rank == 0) {
      ch.send(2, big);
      ch.broadcast("stop");
      conn.control.reset();
      std::lock_guard<std::mutex> lock(mutex);
      rank0Gone = true;
      cv.notify_all();
    } else if (rank == 1) {
      require(next(ch, pending).bytes == "stop", "relay: stop");
      require(failsNaming("rank 0"), "relay: the hang-up of rank 0 fails the next poll");
      conn.control.reset();
    } else {
      {
        std::unique_lock<std::mutex> lock(mutex);
        require(cv.wait_for(lock, 10s, [&] { return rank0Gone; }), "rank 0 never closed");
      }
      require(next(ch, pending).bytes == big, "rank 2: the large message");
      require(next(ch, pending).bytes == "stop", "rank 2: stop");
      require(failsNaming("rank 1"), "rank 2: the relay's hang-up fails the next poll");
    }
  });
}

// Rank 0 tells every rank to stop and closes; only then does rank 2 send its own messages up.
// Relay 1, passing them on, finds its parent gone: its caller still gets the stop first (a
// shutdown, not a failure), and only its next poll fails, naming rank 0.
TEST(TcpControlTree, ARelayThatCannotPassAMessageUpStillDeliversItsParentsLastWords) {
  const int n = 3, fanout = 1;
  MemoryStore store;
  std::mutex mutex;
  std::condition_variable cv;
  int stage = 0;  // 1: rank 0 closed; 2: rank 2 sent
  auto reach = [&](int s) {
    std::lock_guard<std::mutex> lock(mutex);
    stage = s;
    cv.notify_all();
  };
  auto await = [&](int s) {
    std::unique_lock<std::mutex> lock(mutex);
    require(cv.wait_for(lock, 10s, [&] { return stage >= s; }), "stage " + std::to_string(s));
  };
  test::spawnRanks(n, [&](int rank) {
    Connection conn = connectTree(store, rank, n, fanout);
    ControlChannel& ch = *conn.control;
    Messages pending;
    if (rank == 0) {
      ch.broadcast("stop");
      conn.control.reset();
      reach(1);
    } else if (rank == 2) {
      await(1);
      for (int i = 0; i < 20; ++i) ch.send(0, "late " + std::to_string(i));
      reach(2);
      require(next(ch, pending).bytes == "stop", "rank 2: stop");
    } else {
      await(2);
      require(next(ch, pending).bytes == "stop", "relay: stop");
      std::string error;
      try {
        for (int i = 0; i < 20; ++i) ch.poll(pending, 500ms);
      } catch (const IoError& e) {
        error = e.what();
      }
      require(error.find("control connection to rank 0") != std::string::npos,
              "relay: expected the next poll to fail naming rank 0, got '" + error + "'");
    }
  });
}

// Rank 4 (a leaf under relay 1) closes: relay 1's poll fails naming it. Relay 1 then closes as
// its loop would on that error, and both its parent (rank 0) and its other child (rank 3) fail
// naming rank 1 instead of waiting.
TEST(TcpControlTree, AClosingRelayFailsItsParentAndItsChildren) {
  const int n = 7, fanout = 2;
  MemoryStore store;
  std::mutex mutex;
  std::condition_variable cv;
  int finished = 0;
  test::spawnRanks(n, [&](int rank) {
    Connection conn = connectTree(store, rank, n, fanout);
    ControlChannel& ch = *conn.control;
    Messages pending;
    // One round first, so every link has carried something.
    if (rank == 0) {
      for (int i = 1; i < n; ++i) next(ch, pending);
      ch.broadcast("go");
    } else {
      ch.send(0, "hello");
      require(next(ch, pending).bytes == "go", "go");
    }
    auto expectFailureNaming = [&](const std::string& who) {
      std::string error;
      auto deadline = Clock::now() + 10s;
      try {
        while (Clock::now() < deadline) ch.poll(pending, 500ms);
      } catch (const IoError& e) {
        error = e.what();
      }
      require(error.find("control connection to " + who) != std::string::npos,
              "rank " + std::to_string(rank) + " expected an error naming " + who + ", got '" +
                  error + "'");
    };
    if (rank == 4) {
      conn.control.reset();
    } else if (rank == 1) {
      expectFailureNaming("rank 4");
      conn.control.reset();
    } else if (rank == 0 || rank == 3) {
      expectFailureNaming("rank 1");
    }
    // The other ranks stay connected until the checks are done.
    std::unique_lock<std::mutex> lock(mutex);
    if (rank == 0 || rank == 3) ++finished;
    cv.notify_all();
    cv.wait_for(lock, 20s, [&] { return finished == 2; });
  });
}

// Rank 6 (below relay 2) publishes its address but never connects: relay 2 times out waiting for
// it, and every other rank fails at set-up too, naming rank 6, rather than starting a job whose
// control tree has a hole.
TEST(TcpControlTree, ARankMissingBelowARelayFailsEveryRankAtSetUp) {
  const int n = 7, fanout = 2;
  MemoryStore store;
  int port = 0;
  net::Socket silent = net::listenOn("127.0.0.1", 0, &port);
  store.set("addr/6", net::joinHostPort("127.0.0.1", port));
  std::vector<std::string> errors(n - 1);
  test::spawnRanks(n - 1, [&](int rank) {
    ConnectOptions o = test::loopbackOptions(rank, n, kSecret);
    o.controlFanout = fanout;
    o.startTimeout = 400ms;
    try {
      makeTransport("tcp")->connect(o, store);
    } catch (const TimeoutError& e) {
      errors[rank] = e.what();
    }
  });
  for (int r = 0; r < n - 1; ++r) {
    EXPECT_NE(errors[r].find("rank(s) 6"), std::string::npos) << "rank " << r << ": " << errors[r];
  }
}

// A child that claims to pass on a message from a rank outside its subtree ends the channel,
// naming it: the tree's routing is trusted no further than its shape.
TEST(TcpControlTree, AFrameFromOutsideTheSendersSubtreeIsMalformed) {
  const int n = 7;  // fanout 2: rank 1's subtree is 1, 3, 4
  std::vector<net::Socket> sockets(n);
  net::Socket child1, child2;
  for (int r : {1, 2}) {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    sockets[r] = net::Socket(fds[0]);
    (r == 1 ? child1 : child2) = net::Socket(fds[1]);
  }
  tcp::TcpControlChannel root(0, n, std::move(sockets), Millis(10000), 2);
  std::string frames = routedControlFrame(4, "from 4") + routedControlFrame(5, "from 5?");
  ASSERT_EQ(::send(child1.fd(), frames.data(), frames.size(), 0),
            static_cast<ssize_t>(frames.size()));
  Messages got;
  std::string error;
  try {
    for (int i = 0; i < 10; ++i) root.poll(got, 200ms);
  } catch (const IoError& e) {
    error = e.what();
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].from, 4);
  EXPECT_NE(error.find("control connection to rank 1 sent a malformed frame: origin rank 5"),
            std::string::npos)
      << error;
}

// Up to fanout + 1 ranks nothing is relayed: rank 0's sends and broadcasts put exactly the star's
// frames on the wire.
TEST(TcpControlTree, AStarSizedTreeSendsTheStarsFrames) {
  const int n = 3;
  std::vector<net::Socket> sockets(n), far(n);
  for (int r = 1; r < n; ++r) {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
    sockets[r] = net::Socket(fds[0]);
    far[r] = net::Socket(fds[1]);
  }
  tcp::TcpControlChannel root(0, n, std::move(sockets), Millis(10000), 32);
  root.send(1, "one");
  root.broadcast("all");
  for (int r = 1; r < n; ++r) {
    char buf[256];
    ssize_t got = ::recv(far[r].fd(), buf, sizeof(buf), 0);
    ASSERT_GT(got, 0);
    std::string expect = (r == 1 ? controlFrame("one") : "") + controlFrame("all");
    EXPECT_EQ(std::string(buf, static_cast<size_t>(got)), expect) << "rank " << r;
  }
}

}  // namespace
}  // namespace hora
