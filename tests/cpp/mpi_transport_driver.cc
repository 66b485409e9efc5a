// The MPI transport under mpirun: every collective of MpiCommunicator through the shared checks of
// collective_checks.h (the cases the gtest matrix runs on other transports), once with MPI's int
// counts and once with a tiny maxCount that forces the chunked and point-to-point fallback paths;
// subsets;
// the control channel (ordering, crossing large messages, wakeup, timeouts); connect()'s rank
// check; the rendezvous store bootstrapped over MPI (a fresh secret each time, strangers refused);
// and jobs whose control and data roles run on different transports; that the collectives use
// MPI's blocking calls (counted through MPI's profiling interface) under the watchdog that bounds
// them. Run as `mpirun -np N mpi_transport_driver` (N = 1..4). Rank 0 prints
// "mpi transport driver: N passed, M failed"; the exit code is non-zero on any failure.
// --timeout-abort and --timeout-exit: a collective past its bound ends the job (see below).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/common/errors.h"
#include "core/store/memory_store.h"
#include "core/store/prefix_store.h"
#include "core/store/tcp_store.h"
#include "core/transport/connect.h"
#include "core/transport/mpi/communicator.h"
#include "core/transport/mpi/control_channel.h"
#include "core/transport/mpi/mpi_bootstrap.h"
#include "core/transport/mpi/mpi_context.h"
#include "core/transport/tcp/control_channel.h"
#include "core/transport/transport.h"
#include "tests/cpp/collective_checks.h"

// MPI's profiling interface: these definitions take the place of the MPI library's for the engine
// linked into this driver, count the calls and forward them to PMPI_*. Open MPI serves the
// non-blocking collectives from libnbc, up to 3x slower on one host than its tuned blocking ones
// (an in-place 64 MiB MPI_Iallreduce: 50 ms against MPI_Allreduce's 21 ms at 2 ranks), so the
// data path must not call them.
std::atomic<int> gNonBlockingCollectives{0};

extern "C" {
int MPI_Iallreduce(const void* in, void* out, int n, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request* request) {
  ++gNonBlockingCollectives;
  return PMPI_Iallreduce(in, out, n, type, op, comm, request);
}
int MPI_Iallgatherv(const void* in, int n, MPI_Datatype type, void* out, const int counts[],
                    const int displs[], MPI_Datatype outType, MPI_Comm comm, MPI_Request* request) {
  ++gNonBlockingCollectives;
  return PMPI_Iallgatherv(in, n, type, out, counts, displs, outType, comm, request);
}
int MPI_Ibcast(void* buf, int n, MPI_Datatype type, int root, MPI_Comm comm, MPI_Request* request) {
  ++gNonBlockingCollectives;
  return PMPI_Ibcast(buf, n, type, root, comm, request);
}
int MPI_Ialltoallv(const void* in, const int sendCounts[], const int sendDispls[],
                   MPI_Datatype sendType, void* out, const int recvCounts[], const int recvDispls[],
                   MPI_Datatype recvType, MPI_Comm comm, MPI_Request* request) {
  ++gNonBlockingCollectives;
  return PMPI_Ialltoallv(in, sendCounts, sendDispls, sendType, out, recvCounts, recvDispls,
                         recvType, comm, request);
}
int MPI_Ireduce_scatter(const void* in, void* out, const int counts[], MPI_Datatype type, MPI_Op op,
                        MPI_Comm comm, MPI_Request* request) {
  ++gNonBlockingCollectives;
  return PMPI_Ireduce_scatter(in, out, counts, type, op, comm, request);
}
int MPI_Ireduce(const void* in, void* out, int n, MPI_Datatype type, MPI_Op op, int root,
                MPI_Comm comm, MPI_Request* request) {
  ++gNonBlockingCollectives;
  return PMPI_Ireduce(in, out, n, type, op, root, comm, request);
}
int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  ++gNonBlockingCollectives;
  return PMPI_Ibarrier(comm, request);
}
}

namespace hora {
namespace {

int gRank = 0;
int gSize = 1;
int gPassed = 0;
int gFailed = 0;

void expect(bool ok, const std::string& what) {
  if (ok) {
    ++gPassed;
  } else {
    ++gFailed;
    std::fprintf(stderr, "rank %d: FAILED %s\n", gRank, what.c_str());
  }
}

void expectThrows(const std::function<void()>& body, const std::string& what) {
  try {
    body();
  } catch (const Error&) {
    expect(true, what);
    return;
  }
  expect(false, what + " (no error)");
}

// Every case of the shared collective checks for this communicator's size. A failed case prints
// as label/Collective/case, the name the gtest matrix gives the same case on other transports.
// MPI makes no promise about the order it reduces in, so floating inputs are exact. Integer sums
// and products overflow and must wrap as in NumPy: MPI leaves overflow undefined (Open MPI's
// vectorised ops saturate 8- and 16-bit sums), so Hora reduces those types with its own ops.
void testCollectives(Communicator& comm, const std::string& label, bool large, Store& store) {
  test::CheckContext context;
  context.store = &store;
  for (const test::Case& c : test::allMatrixCases(comm.size(), large)) {
    // Each label runs each case once, so the name is a key prefix no other run shares.
    std::string name = label + "/" + test::fullCaseName(c);
    context.storePrefix = name;
    std::string failure = test::runCase(comm, c, context);
    expect(failure.empty(), failure.empty() ? name : name + ": " + failure);
  }
  const int n = comm.size();
  expectThrows([&] { comm.broadcast(nullptr, 4, n); }, label + " broadcast bad root");
  expectThrows([&] { comm.allreduce(nullptr, 4, DataType::Float32, ReduceOp::Average); },
               label + " allreduce average refused");
}

// With a maxCount of 7, point-to-point transfers travel in pieces of 7 bytes. A peer that sends
// 10 bytes where 12 are expected shortens the last piece (3 bytes for 5), which MPI completes
// without error: the receiver must say so rather than return a buffer partly unwritten.
void testShortPieceIsAnError(Communicator& comm, const std::string& label) {
  std::vector<uint8_t> out(10, 1), in(12, 0);
  if (gRank == 0) {
    comm.sendRecv(1, out.data(), out.size(), 1, nullptr, 0);
  } else if (gRank == 1) {
    std::string message;
    try {
      comm.sendRecv(0, nullptr, 0, 0, in.data(), in.size());
    } catch (const Error& e) {
      message = e.what();
    }
    expect(
        message.find("rank 0 sent a piece of 3 bytes where 5 were expected") != std::string::npos,
        label + " sendrecv: a short piece is an error (got: '" + message + "')");
  }
}

// Polls until `got` holds at least `count` messages; a job whose messages stop arriving fails
// after a minute instead of hanging.
void pollUntil(ControlChannel& ch, std::vector<ControlChannel::Message>& got, size_t count) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (got.size() < count) {
    if (std::chrono::steady_clock::now() > deadline) {
      throw std::runtime_error("control: " + std::to_string(got.size()) + " of " +
                               std::to_string(count) + " messages after 60 s");
    }
    ch.poll(got, Millis(1000));
  }
}

void testControlChannel(ControlChannel& ch) {
  const int n = ch.size(), me = ch.rank();
  std::vector<ControlChannel::Message> got;
  // Ordered delivery, both directions.
  if (me == 0) {
    for (int r = 1; r < n; ++r) {
      for (int k = 0; k < 3; ++k) ch.send(r, "m" + std::to_string(k) + "@" + std::to_string(r));
    }
    // A fast peer's next (large) message may arrive before a slow peer's replies: replies are
    // checked per sender, and whatever else arrives is kept for the next part.
    std::vector<int> seen(n, 0);
    std::vector<ControlChannel::Message> later;
    bool ordered = true;
    int replies = 0;
    while (replies < 3 * (n - 1)) {
      pollUntil(ch, got, 1);
      for (auto& m : got) {
        if (m.bytes.size() > (1 << 20)) {
          later.push_back(std::move(m));
          continue;
        }
        ordered = ordered &&
                  m.bytes == "r" + std::to_string(seen[m.from]++) + "@" + std::to_string(m.from);
        ++replies;
      }
      got.clear();
    }
    expect(ordered, "control: replies in order per sender");
    got = std::move(later);
  } else {
    pollUntil(ch, got, 3);
    bool ordered = true;
    for (int k = 0; k < 3; ++k) {
      ordered = ordered && got[k].from == 0 &&
                got[k].bytes == "m" + std::to_string(k) + "@" + std::to_string(me);
    }
    expect(ordered, "control: messages in order");
    for (int k = 0; k < 3; ++k) ch.send(0, "r" + std::to_string(k) + "@" + std::to_string(me));
    got.clear();
  }
  // Large messages crossing: rank 0 and every other rank send 4 MiB to each other at once.
  std::string big(4 << 20, 'x');
  if (me == 0) {
    for (int r = 1; r < n; ++r) ch.send(r, big + std::to_string(r));
    pollUntil(ch, got, static_cast<size_t>(n - 1));
    bool ok = true;
    for (auto& m : got) ok = ok && m.bytes == big + "up" + std::to_string(m.from);
    expect(ok, "control: crossing large messages (rank 0)");
  } else {
    ch.send(0, big + "up" + std::to_string(me));
    pollUntil(ch, got, 1);
    expect(got[0].bytes == big + std::to_string(me), "control: crossing large messages");
  }
  got.clear();
  // A timeout with nothing to read returns empty, after about the timeout.
  auto t0 = std::chrono::steady_clock::now();
  ch.poll(got, Millis(30));
  auto waited = std::chrono::steady_clock::now() - t0;
  expect(got.empty() && waited >= std::chrono::milliseconds(29) && waited < std::chrono::seconds(2),
         "control: poll timeout");
  // wakeup() from another thread ends an endless poll.
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    ch.wakeup();
  });
  t0 = std::chrono::steady_clock::now();
  ch.poll(got, Millis(-1));
  waker.join();
  expect(got.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5),
         "control: wakeup");
  // A wakeup before the poll makes it return at once.
  ch.wakeup();
  ch.poll(got, Millis(10000));
  expect(got.empty(), "control: early wakeup");
  // With a spin budget (polling before sleeping): the timeout and wakeup still end the poll,
  // and a message sent meanwhile is received.
  t0 = std::chrono::steady_clock::now();
  ch.poll(got, Millis(30), Micros(500000));
  waited = std::chrono::steady_clock::now() - t0;
  expect(got.empty() && waited >= std::chrono::milliseconds(29) && waited < std::chrono::seconds(2),
         "control: spinning poll timeout");
  std::thread spinWaker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ch.wakeup();
  });
  ch.poll(got, Millis(-1), Micros(2000000));
  spinWaker.join();
  expect(got.empty(), "control: wakeup ends a spinning poll");
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == 0) {
    for (int r = 1; r < n; ++r) ch.send(r, "while spinning");
  } else {
    while (got.empty()) ch.poll(got, Millis(10000), Micros(1000000));
    expect(got[0].from == 0 && got[0].bytes == "while spinning",
           "control: message seen while spinning");
  }
  expectThrows([&] { ch.send(me, "self"); }, "control: no route to self");
  MPI_Barrier(MPI_COMM_WORLD);
}

ConnectOptions worldOptions() {
  ConnectOptions o;
  o.rank = gRank;
  o.size = gSize;
  o.startTimeout = Millis(20000);
  o.opTimeout = Millis(20000);
  return o;
}

void testStoreBootstrap() {
  BootstrappedStore a = mpi::bootstrapStore(worldOptions());
  expect(
      a.secret.size() == 64 && a.secret.find_first_not_of("0123456789abcdef") == std::string::npos,
      "bootstrap: the secret is 64 hex digits");
  expect((a.server != nullptr) == (gRank == 0), "bootstrap: rank 0 alone serves");
  // Every rank reached the same store.
  a.client->set("rank/" + std::to_string(gRank), a.secret);
  bool same = true;
  for (int r = 0; r < gSize; ++r) {
    same = same && a.client->get("rank/" + std::to_string(r), Millis(20000)) == a.secret;
  }
  expect(same, "bootstrap: one store, one secret on every rank");
  BootstrappedStore b = mpi::bootstrapStore(worldOptions());
  expect(b.secret != a.secret, "bootstrap: each bootstrap draws a fresh secret");
  if (gRank == 0) {
    // A stranger who knows the address but not the secret (none, or another job's) is refused.
    for (const std::string& guess : {std::string(), b.secret}) {
      expectThrows([&] { TcpStoreClient("127.0.0.1", a.server->port(), guess, Millis(3000)); },
                   "bootstrap: a client without the secret is refused");
    }
    TcpStoreClient insider("127.0.0.1", a.server->port(), a.secret, Millis(3000));
    expect(insider.get("rank/0", Millis(1000)) == a.secret,
           "bootstrap: the secret opens the store");
  }
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0's servers outlive every other rank's use of them
}

// Negotiation on one transport, collectives on the other, over a store bootstrapped over MPI.
void testMixedRoles() {
  BootstrappedStore boot = mpi::bootstrapStore(worldOptions());
  ConnectOptions o = worldOptions();
  o.secret = boot.secret;
  const std::pair<std::string, std::string> pairs[] = {{"mpi", "tcp"}, {"tcp", "mpi"}};
  for (const auto& [controllerName, dataName] : pairs) {
    std::string label = controllerName + "+" + dataName;
    auto controller = makeTransport(controllerName);
    auto data = makeTransport(dataName);
    expect(transportLabel(*controller, *data) == label, label + ": label");
    PrefixStore store(*boot.client, label);
    Connection c = connectRoles(*controller, *data, o, store);
    expect(c.world->backendName() == dataName, label + ": collectives on " + dataName);
    bool controlOnMpi = dynamic_cast<mpi::MpiControlChannel*>(c.control.get()) != nullptr;
    bool controlOnTcp = dynamic_cast<tcp::TcpControlChannel*>(c.control.get()) != nullptr;
    expect(controllerName == "mpi" ? controlOnMpi : controlOnTcp,
           label + ": control on " + controllerName);
    int one = 1;
    c.world->allreduce(&one, 1, DataType::Int32, ReduceOp::Sum);
    expect(one == gSize, label + ": allreduce");
    std::vector<ControlChannel::Message> got;
    if (gRank == 0) {
      pollUntil(*c.control, got, static_cast<size_t>(gSize - 1));
      bool ok = true;
      for (auto& m : got) ok = ok && m.bytes == "ready@" + std::to_string(m.from);
      expect(ok, label + ": control messages");
    } else {
      c.control->send(0, "ready@" + std::to_string(gRank));
    }
    c.world->barrier();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Rank 0, busy elsewhere (no MPI calls) for `busy`, then takes in one message from every peer.
std::vector<ControlChannel::Message> receiveFromEveryPeerAfter(ControlChannel& ch,
                                                               std::chrono::milliseconds busy) {
  std::this_thread::sleep_for(busy);
  std::vector<ControlChannel::Message> got;
  pollUntil(ch, got, static_cast<size_t>(ch.size() - 1));
  return got;
}

// A large message to a rank that makes no MPI calls for a while (busy in a collective on another
// transport, waiting for this rank) must not hold the sender until the receiver matches it.
void testSendDoesNotWaitForTheReceiver(ControlChannel& ch) {
  std::string big(4 << 20, 'b');
  if (ch.rank() == 0) {
    auto got = receiveFromEveryPeerAfter(ch, std::chrono::milliseconds(400));
    bool ok = true;
    for (auto& m : got) ok = ok && m.bytes == big;
    expect(ok, "control: large messages from busy peers arrive");
  } else {
    auto t0 = std::chrono::steady_clock::now();
    ch.send(0, big);
    expect(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(300),
           "control: send returns before the receiver matches it");
    std::vector<ControlChannel::Message> got;
    ch.poll(got, Millis(600));  // lets MPI finish the send
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// A send the receiver leaves unmatched times out only after this rank has waited the op timeout
// in poll(); time spent elsewhere (busy in a collective) does not count.
void testPendingSendTimeout(ControlChannel& ch) {
  std::string big(4 << 20, 't');
  if (ch.rank() == 0) {
    receiveFromEveryPeerAfter(ch, std::chrono::milliseconds(2000));
  } else {
    ch.send(0, big);
    std::this_thread::sleep_for(std::chrono::milliseconds(400));  // longer than the op timeout
    std::vector<ControlChannel::Message> got;
    bool early = false;
    try {
      ch.poll(got, Millis(50));
    } catch (const TimeoutError&) {
      early = true;
    }
    expect(!early, "control: time outside poll() does not count towards a send's timeout");
    expectThrows([&] { ch.poll(got, Millis(500)); },
                 "control: an unmatched send times out in poll()");
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

MPI_Comm dupWorld() {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &c);
  return c;
}

void run() {
  mpi::MpiContext& context = mpi::MpiContext::acquire();
  gRank = context.worldRank();
  gSize = context.worldSize();
  // Where the barrier checks leave their marks.
  BootstrappedStore marks = mpi::bootstrapStore(worldOptions());
  for (size_t maxCount : {size_t(INT_MAX), size_t(7)}) {
    // With a tiny maxCount (chunked and point-to-point paths) only the small cases: large buffers
    // would take hundreds of thousands of calls.
    const bool large = maxCount == INT_MAX;
    std::string label = large ? "Mpi" : "MpiMax7";
    // With a bound, so that the collectives run under the watchdog's thread.
    mpi::MpiCommunicator world(dupWorld(), gRank, maxCount, Millis(60000));
    const int nonBlockingBefore = gNonBlockingCollectives.load();
    testCollectives(world, label, large, *marks.client);
    if (large) {
      expect(gNonBlockingCollectives.load() == nonBlockingBefore,
             label + ": the collectives call MPI's blocking forms");
    }
    std::vector<int> all(gSize);
    for (int i = 0; i < gSize; ++i) all[i] = i;
    testCollectives(*world.subset(all), label + "/subset-all", false, *marks.client);
    if (gSize > 2) {
      // The odd ranks and, separately, the even ranks, created concurrently.
      std::vector<int> part;
      for (int i = gRank % 2; i < gSize; i += 2) part.push_back(i);
      auto sub = world.subset(part);
      expect(sub->size() == static_cast<int>(part.size()) && sub->rank() == gRank / 2,
             label + " subset rank");
      testCollectives(*sub, label + "/parity" + std::to_string(gRank % 2), false, *marks.client);
    }
    expectThrows([&] { world.subset({gSize}); }, label + " subset outside");
  }
  if (gSize > 1) {
    // On a communicator of its own: a failed call leaves its communicator unusable.
    mpi::MpiCommunicator pieces(dupWorld(), gRank, 7, Millis(60000));
    testShortPieceIsAnError(pieces, "MpiMax7");
  }
  MPI_Barrier(MPI_COMM_WORLD);  // rank 0's store outlives every rank's use of it
  {
    mpi::MpiControlChannel channel(dupWorld(), gRank, Millis(20000));
    testControlChannel(channel);
    if (gSize > 1) testSendDoesNotWaitForTheReceiver(channel);
  }
  if (gSize > 1) {
    mpi::MpiControlChannel channel(dupWorld(), gRank, Millis(200));
    testPendingSendTimeout(channel);
  }
  {
    MemoryStore store;
    auto transport = makeTransport("mpi");
    expect(transport->name() == "mpi", "transport name");
    ConnectOptions o;
    o.rank = gRank;
    o.size = gSize + 1;
    expectThrows([&] { transport->connect(o, store); }, "connect refuses a wrong size");
    o.size = gSize;
    Connection c = transport->connect(o, store);
    expect(c.world->size() == gSize && c.world->rank() == gRank && c.control->size() == gSize,
           "connect over MPI_COMM_WORLD");
    int one = 1;
    c.world->allreduce(&one, 1, DataType::Int32, ReduceOp::Sum);
    expect(one == gSize, "connected world allreduce");
  }
  testStoreBootstrap();
  testMixedRoles();
}

}  // namespace

// --timeout-abort: rank 0 enters an allreduce that the other ranks never join; with a 1 s
// timeout it must log which call timed out and abort the MPI job (ctest matches the log line;
// without the bound the job would only end after the others' 60 s sleep, with no such line).
// --timeout-exit: the same with MPI initialised at MPI_THREAD_SERIALIZED, where the watchdog's
// thread may not call MPI_Abort: the rank exits with 124 and mpirun ends the job.
int timeoutAbort(bool serialized) {
  if (serialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  }
  mpi::MpiContext& context = mpi::MpiContext::acquire();
  hora::gRank = context.worldRank();
  mpi::MpiCommunicator world(hora::dupWorld(), hora::gRank, INT_MAX, Millis(1000));
  if (hora::gRank == 0) {
    int one = 1;
    world.allreduce(&one, 1, DataType::Int32, ReduceOp::Sum);
    std::printf("rank 0: the allreduce returned although no other rank joined it\n");
    return 1;
  }
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 1;
}

}  // namespace hora

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--timeout-abort" || mode == "--timeout-exit") {
    return hora::timeoutAbort(mode == "--timeout-exit");
  }
  try {
    hora::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: unexpected error: %s\n", hora::gRank, e.what());
    ++hora::gFailed;
  }
  int counts[2] = {hora::gPassed, hora::gFailed}, total[2] = {0, 0};
  MPI_Reduce(counts, total, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (hora::gRank == 0) {
    std::printf("mpi transport driver (%d ranks): %d passed, %d failed\n", hora::gSize, total[0],
                total[1]);
  }
  return hora::gFailed == 0 ? 0 : 1;
}
