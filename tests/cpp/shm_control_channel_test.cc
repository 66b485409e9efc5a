// The shared-memory control channel with N ranks as threads of this process: delivery whole and in
// order per sender, messages larger than a control ring, both sides sending large messages at once,
// wakeup(), the poll timeout, peers that leave, and which ranks move negotiation onto the segment.
// A rank killed with SIGKILL in another process is tests/single/test_shm_faults.py.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/common/errors.h"
#include "core/store/memory_store.h"
#include "core/transport/shm/control_channel.h"
#include "core/transport/shm/segment.h"
#include "core/transport/shm/transport.h"
#include "core/transport/tcp/control_channel.h"
#include "tests/cpp/connect_options.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

using namespace std::chrono_literals;
using Message = ControlChannel::Message;

ConnectOptions options(int rank, int size) {
  return test::loopbackOptions(rank, size, "shm-control-test");
}

Connection connectShm(Store& store, const ConnectOptions& o) {
  Connection c = makeTransport("shm")->connect(o, store);
  if (dynamic_cast<shm::ShmControlChannel*>(c.control.get()) == nullptr) {
    throw std::runtime_error("the control channel is not the shared-memory one");
  }
  return c;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// A message whose every byte depends on (sender, index, position): a lost, repeated or shifted
// byte shows.
std::string pattern(int from, int index, size_t bytes) {
  std::string s(bytes, '\0');
  for (size_t i = 0; i < bytes; ++i) s[i] = static_cast<char>((from * 131 + index * 7 + i) % 251);
  return s;
}

// Polls until `count` messages arrived (each poll bounded; the test fails rather than hangs).
std::vector<Message> receive(ControlChannel& c, size_t count) {
  std::vector<Message> got;
  auto deadline = Clock::now() + 20s;
  while (got.size() < count) {
    require(Clock::now() < deadline, "messages did not arrive");
    c.poll(got, 1000ms, Micros(20));
  }
  return got;
}

TEST(ShmControlChannel, DeliversWholeMessagesInOrderPerSender) {
  const int n = 4, each = 300;
  MemoryStore store;
  test::spawnRanks(n, [&](int rank) {
    Connection c = connectShm(store, options(rank, n));
    ControlChannel& ch = *c.control;
    auto sizeOf = [](int i) { return static_cast<size_t>((i * 37) % 5000); };  // 0 B included
    if (rank == 0) {
      auto got = receive(ch, static_cast<size_t>(each) * (n - 1));
      require(got.size() == static_cast<size_t>(each) * (n - 1), "too many messages");
      std::vector<int> next(n, 0);
      for (const auto& m : got) {
        require(m.from >= 1 && m.from < n, "bad sender");
        int i = next[m.from]++;
        require(m.bytes == pattern(m.from, i, sizeOf(i)), "message " + std::to_string(i) +
                                                              " of rank " + std::to_string(m.from) +
                                                              " arrived out of order or damaged");
      }
      for (int i = 0; i < each; ++i) {
        for (int r = 1; r < n; ++r) ch.send(r, pattern(0, i, sizeOf(i)));
      }
    } else {
      for (int i = 0; i < each; ++i) ch.send(0, pattern(rank, i, sizeOf(i)));
      auto got = receive(ch, each);
      for (int i = 0; i < each; ++i) {
        require(got[i].from == 0 && got[i].bytes == pattern(0, i, sizeOf(i)),
                "reply " + std::to_string(i) + " arrived out of order or damaged");
      }
    }
    c.world->barrier();
  });
}

TEST(ShmControlChannel, MessageLargerThanTheRingArrivesWhole) {
  const size_t big = 4 * shm::kControlRingBytes + 13;
  MemoryStore store;
  test::spawnRanks(2, [&](int rank) {
    Connection c = connectShm(store, options(rank, 2));
    if (rank == 1) {
      c.control->send(0, pattern(1, 0, big));
      c.control->send(0, "after");
    } else {
      auto got = receive(*c.control, 2);
      require(got[0].bytes.size() == big, "wrong size " + std::to_string(got[0].bytes.size()));
      require(got[0].bytes == pattern(1, 0, big), "large message damaged");
      require(got[1].bytes == "after", "the message after it was damaged");
    }
    c.world->barrier();
  });
}

TEST(ShmControlChannel, BothSidesSendingLargeMessagesDoNotDeadlock) {
  const size_t big = 3 * shm::kControlRingBytes + 5;
  const int count = 3;
  MemoryStore store;
  test::spawnRanks(2, [&](int rank) {
    Connection c = connectShm(store, options(rank, 2));
    const int peer = 1 - rank;
    for (int i = 0; i < count; ++i) c.control->send(peer, pattern(rank, i, big));
    auto got = receive(*c.control, count);
    for (int i = 0; i < count; ++i) {
      require(got[i].from == peer && got[i].bytes == pattern(peer, i, big),
              "message " + std::to_string(i) + " damaged or out of order");
    }
    c.world->barrier();
  });
}

TEST(ShmControlChannel, WakeupEndsAnUnboundedPollAndTimeoutEndsABoundedOne) {
  MemoryStore store;
  test::spawnRanks(2, [&](int rank) {
    Connection c = connectShm(store, options(rank, 2));
    if (rank == 0) {
      std::vector<Message> out;
      c.control->poll(out, 50ms, Micros(10));
      require(out.empty(), "a message from nowhere");
      std::thread waker([&] {
        std::this_thread::sleep_for(50ms);
        c.control->wakeup();
      });
      c.control->poll(out, Millis(-1), Micros(10));  // only the wake-up can end this
      waker.join();
      require(out.empty(), "a message from nowhere");
      // A wake-up before the poll is not lost either.
      c.control->wakeup();
      c.control->poll(out, Millis(-1));
      require(out.empty(), "a message from nowhere");
    }
    c.world->barrier();
  });
}

TEST(ShmControlChannel, PeerThatLeavesMakesPollThrowNamingIt) {
  const int n = 3;
  MemoryStore store;
  std::mutex m;
  std::condition_variable cv;
  bool rank1Done = false;
  test::spawnRanks(n, [&](int rank) {
    Connection c = connectShm(store, options(rank, n));
    c.world->barrier();
    if (rank == 2) return;  // leaves: its connection closes
    if (rank == 1) {
      // Rank 1 talks only to rank 0: rank 2 leaving does not concern its control channel.
      std::vector<Message> out;
      c.control->poll(out, 200ms);
      require(out.empty(), "a message from nowhere");
      std::lock_guard<std::mutex> lock(m);
      rank1Done = true;
      cv.notify_all();
      return;
    }
    std::string message;
    try {
      std::vector<Message> out;
      c.control->poll(out, Millis(-1));
    } catch (const IoError& e) {
      message = e.what();
    }
    std::unique_lock<std::mutex> lock(m);  // rank 0 stays until rank 1 has polled
    cv.wait_for(lock, 10s, [&] { return rank1Done; });
    require(message.find("control connection to rank 2") != std::string::npos,
            "expected IoError naming rank 2, got: " + message);
  });
}

// A rank whose collective fails (a peer died) still tells the others why: the channel outlives the
// data path's failure, and what it sent before closing arrives before the close is reported.
TEST(ShmControlChannel, AFailedCollectiveStillSendsItsReason) {
  const int n = 3;
  MemoryStore store;
  test::spawnRanks(n, [&](int rank) {
    Connection c = connectShm(store, options(rank, n));
    c.world->barrier();
    if (rank == 2) return;  // leaves
    if (rank == 0) {
      std::string reason;
      try {
        c.world->barrier();  // rank 2 is gone: fails, and marks this rank gone for the data path
      } catch (const std::exception& e) {
        reason = e.what();
      }
      require(reason.find("rank 2") != std::string::npos, "the barrier must fail naming rank 2");
      c.control->send(1, "stopping: " + reason);
      return;  // closes its end
    }
    std::vector<Message> got;
    std::string closed;
    try {
      auto deadline = Clock::now() + 20s;
      while (Clock::now() < deadline) c.control->poll(got, 1000ms);
    } catch (const IoError& e) {
      closed = e.what();
    }
    require(got.size() == 1 && got[0].from == 0 && got[0].bytes.find("rank 2") != std::string::npos,
            "rank 0's reason must arrive");
    require(closed.find("control connection to rank 0 closed") != std::string::npos,
            "then the close, naming rank 0: " + closed);
  });
}

TEST(ShmControlChannel, SendIntoAFullRingFailsForAGonePeerAndTimesOutForASilentOne) {
  for (bool silent : {false, true}) {
    MemoryStore store;
    std::mutex m;
    std::condition_variable cv;
    bool done = false;
    test::spawnRanks(2, [&](int rank) {
      ConnectOptions o = options(rank, 2);
      o.opTimeout = 300ms;
      Connection c = connectShm(store, o);
      c.world->barrier();
      if (rank == 1) {
        if (!silent) return;                   // leaves
        std::unique_lock<std::mutex> lock(m);  // stays, reading nothing
        cv.wait_for(lock, 10s, [&] { return done; });
        return;
      }
      std::string message;
      try {
        c.control->send(1, pattern(0, 0, 2 * shm::kControlRingBytes));
      } catch (const TimeoutError& e) {
        message = std::string("timeout: ") + e.what();
      } catch (const IoError& e) {
        message = std::string("io: ") + e.what();
      }
      {
        std::lock_guard<std::mutex> lock(m);
        done = true;
      }
      cv.notify_all();
      require(message.rfind(silent ? "timeout: " : "io: ", 0) == 0 &&
                  message.find("rank 1") != std::string::npos,
              "unexpected outcome: " + message);
    });
  }
}

TEST(ShmControlChannel, MovesOnlyWhenEveryRankAllowsIt) {
  for (int refusing : {-1, 2}) {
    MemoryStore store;
    test::spawnRanks(3, [&](int rank) {
      ConnectOptions o = options(rank, 3);
      o.shmControl = rank != refusing;
      Connection c = makeTransport("tcp")->connect(o, store);
      require(shm::preferSharedMemory(c, o, store, false), "shared memory was not used");
      bool onShm = dynamic_cast<shm::ShmControlChannel*>(c.control.get()) != nullptr;
      bool onTcp = dynamic_cast<tcp::TcpControlChannel*>(c.control.get()) != nullptr;
      require(refusing < 0 ? onShm : onTcp, "negotiation on the wrong channel");
      if (rank == 0) {
        for (int r = 1; r < 3; ++r) c.control->send(r, "hello " + std::to_string(r));
      } else {
        auto got = receive(*c.control, 1);
        require(got[0].bytes == "hello " + std::to_string(rank), "wrong message");
      }
      c.world->barrier();
    });
  }
}

}  // namespace
}  // namespace hora
