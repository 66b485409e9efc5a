// The MPI transport under mpirun: every collective of MpiCommunicator against a reference
// computed here (all dtypes and element-wise ops, several sizes), once with MPI's int counts and
// once with a tiny maxCount that forces the chunked and point-to-point fallback paths; subsets;
// the control channel (ordering, crossing large messages, wakeup, timeouts); connect()'s rank
// check; the rendezvous store bootstrapped over MPI (a fresh secret each time, strangers refused);
// and jobs whose control and data roles run on different transports. Run as
// `mpirun -np N mpi_transport_driver` (N = 1..4). Rank 0 prints
// "mpi transport driver: N passed, M failed"; the exit code is non-zero on any failure.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/common/errors.h"
#include "core/common/reduce.h"
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

namespace hora {
namespace {

using Bytes = std::vector<uint8_t>;

int gRank = 0;
int gSize = 1;
int gPassed = 0;
int gFailed = 0;

const DataType kDtypes[] = {DataType::UInt8,   DataType::Int8,    DataType::UInt16, DataType::Int16,
                            DataType::Int32,   DataType::Int64,   DataType::Float16, DataType::BFloat16,
                            DataType::Float32, DataType::Float64, DataType::Bool};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};

bool isSigned(DataType t) {
  return t == DataType::Int8 || t == DataType::Int16 || t == DataType::Int32 || t == DataType::Int64 ||
         isFloating(t);
}

void setValue(void* buf, size_t i, DataType t, double v) {
  switch (t) {
    case DataType::UInt8: static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v); break;
    case DataType::Int8: static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v); break;
    case DataType::UInt16: static_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(v); break;
    case DataType::Int16: static_cast<int16_t*>(buf)[i] = static_cast<int16_t>(v); break;
    case DataType::Int32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::Int64: static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v); break;
    case DataType::Float16: static_cast<uint16_t*>(buf)[i] = floatToHalf(static_cast<float>(v)); break;
    case DataType::BFloat16: static_cast<uint16_t*>(buf)[i] = floatToBfloat16(static_cast<float>(v)); break;
    case DataType::Float32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(buf)[i] = v; break;
    case DataType::Bool: static_cast<uint8_t*>(buf)[i] = v != 0.0 ? 1 : 0; break;
  }
}

// Rank r's input for a test: values whose reduction over 4 ranks is exact in every dtype and
// does not overflow, so the order MPI reduces in does not matter.
Bytes input(int r, size_t count, DataType t, ReduceOp op, int salt) {
  Bytes b(count * dtypeSize(t));
  for (size_t i = 0; i < count; ++i) {
    unsigned h = static_cast<unsigned>((i * 2654435761u) ^ (static_cast<unsigned>(r) * 40503u) ^
                                       (static_cast<unsigned>(salt) * 97u));
    double v;
    if (t == DataType::Bool) {
      v = (h >> 3) & 1;
    } else if (op == ReduceOp::Product) {
      v = 1 + (h % 2);
      if (isSigned(t) && (h & 8)) v = -v;
      if (isFloating(t) && (h & 16)) v = 0.5;
    } else {
      v = static_cast<double>(h % 9);
      if (isSigned(t)) v -= 4;
      if (isFloating(t)) v += (h & 32) ? 0.5 : 0.0;
    }
    setValue(b.data(), i, t, v);
  }
  return b;
}

Bytes reduceRef(size_t count, DataType t, ReduceOp op, int salt, int n) {
  Bytes acc = input(0, count, t, op, salt);
  for (int r = 1; r < n; ++r) {
    Bytes x = input(r, count, t, op, salt);
    if (count > 0) reduceInto(acc.data(), x.data(), count, t, op);
  }
  return acc;
}

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

Bytes pattern(int r, size_t bytes, int salt) {
  Bytes b(bytes);
  for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<uint8_t>(r * 31 + i * 7 + salt);
  return b;
}

void testCollectives(Communicator& comm, const std::string& label) {
  const int n = comm.size(), me = comm.rank();
  const size_t sizes[] = {0, 1, 17, 1001};
  int salt = 0;
  for (DataType t : kDtypes) {
    for (ReduceOp op : kOps) {
      for (size_t count : sizes) {
        ++salt;
        Bytes buf = input(me, count, t, op, salt);
        comm.allreduce(buf.data(), count, t, op);
        expect(buf == reduceRef(count, t, op, salt, n),
               label + " allreduce " + dtypeName(t) + " " + reduceOpName(op) + " " + std::to_string(count));
      }
    }
  }
  for (DataType t : {DataType::Float16, DataType::BFloat16, DataType::Int32, DataType::Float64, DataType::Bool}) {
    for (size_t rows : {size_t(0), size_t(1), size_t(13)}) {
      ++salt;
      std::vector<size_t> counts(n);
      for (int k = 0; k < n; ++k) counts[k] = rows + static_cast<size_t>(k % 2);
      size_t total = 0, mine = 0;
      for (int k = 0; k < n; ++k) {
        if (k == me) mine = total;
        total += counts[k];
      }
      Bytes in = input(me, total, t, ReduceOp::Sum, salt);
      Bytes out(counts[me] * dtypeSize(t));
      comm.reduceScatter(in.data(), out.data(), counts, t, ReduceOp::Sum);
      Bytes ref = reduceRef(total, t, ReduceOp::Sum, salt, n);
      Bytes want(ref.begin() + mine * dtypeSize(t), ref.begin() + (mine + counts[me]) * dtypeSize(t));
      expect(out == want, label + " reducescatter " + dtypeName(t) + " " + std::to_string(rows));
    }
  }
  for (bool inPlace : {false, true}) {
    for (size_t unit : {size_t(1), size_t(4), size_t(24)}) {
      ++salt;
      std::vector<size_t> bytes(n);
      for (int k = 0; k < n; ++k) bytes[k] = unit * static_cast<size_t>((k * 3 + salt) % 5);
      size_t total = 0, mine = 0;
      for (int k = 0; k < n; ++k) {
        if (k == me) mine = total;
        total += bytes[k];
      }
      Bytes out(total, 0xee), want;
      for (int k = 0; k < n; ++k) {
        Bytes p = pattern(k, bytes[k], salt);
        want.insert(want.end(), p.begin(), p.end());
      }
      Bytes own = pattern(me, bytes[me], salt);
      if (inPlace) {
        std::copy(own.begin(), own.end(), out.begin() + mine);
        comm.allgatherv(out.data() + mine, out.data(), bytes);
      } else {
        comm.allgatherv(own.data(), out.data(), bytes);
      }
      expect(out == want, label + " allgatherv unit " + std::to_string(unit) + (inPlace ? " in place" : ""));
    }
  }
  for (int root = 0; root < n; ++root) {
    for (size_t bytes : {size_t(0), size_t(1), size_t(100003)}) {
      Bytes buf = me == root ? pattern(root, bytes, 5) : Bytes(bytes, 0);
      comm.broadcast(buf.data(), bytes, root);
      expect(buf == pattern(root, bytes, 5), label + " broadcast root " + std::to_string(root));
    }
  }
  for (size_t unit : {size_t(1), size_t(8)}) {
    // Rank i sends (i + j) % 3 units to rank j.
    std::vector<size_t> send(n), recv(n);
    for (int j = 0; j < n; ++j) {
      send[j] = unit * static_cast<size_t>((me + j) % 3);
      recv[j] = unit * static_cast<size_t>((j + me) % 3);
    }
    Bytes in, want;
    for (int j = 0; j < n; ++j) {
      Bytes p = pattern(me * 10 + j, send[j], 9);
      in.insert(in.end(), p.begin(), p.end());
      Bytes q = pattern(j * 10 + me, recv[j], 9);
      want.insert(want.end(), q.begin(), q.end());
    }
    Bytes out(want.size(), 0);
    comm.alltoallv(in.data(), send, out.data(), recv);
    expect(out == want, label + " alltoallv unit " + std::to_string(unit));
  }
  comm.barrier();
  expect(true, label + " barrier");
  {
    int to = (me + 1) % n, from = (me + n - 1) % n;
    Bytes send = pattern(me, 5000, 3), recv(5000, 0);
    comm.sendRecv(to, send.data(), send.size(), from, recv.data(), recv.size());
    expect(recv == pattern(from, 5000, 3), label + " sendrecv ring");
    // Only send (to the next) or only receive (from the previous), alternating by parity.
    if (n % 2 == 0) {
      Bytes one = pattern(me, 77, 4), got(77, 0);
      if (me % 2 == 0) {
        comm.sendRecv(me + 1, one.data(), one.size(), 0, nullptr, 0);
      } else {
        comm.sendRecv(0, nullptr, 0, me - 1, got.data(), got.size());
        expect(got == pattern(me - 1, 77, 4), label + " sendrecv one-sided");
      }
    }
    Bytes self = pattern(me, 64, 6), back(64, 0);
    comm.sendRecv(me, self.data(), self.size(), me, back.data(), back.size());
    expect(back == self, label + " sendrecv self");
  }
  expectThrows([&] { comm.broadcast(nullptr, 4, n); }, label + " broadcast bad root");
  expectThrows([&] { comm.allreduce(nullptr, 4, DataType::Float32, ReduceOp::Average); },
               label + " allreduce average refused");
}

void testControlChannel(ControlChannel& ch) {
  const int n = ch.size(), me = ch.rank();
  std::vector<ControlChannel::Message> got;
  // Ordered delivery, both directions.
  if (me == 0) {
    for (int r = 1; r < n; ++r) {
      for (int k = 0; k < 3; ++k) ch.send(r, "m" + std::to_string(k) + "@" + std::to_string(r));
    }
    std::vector<int> seen(n, 0);
    bool ordered = true;
    while (got.size() < static_cast<size_t>(3 * (n - 1))) ch.poll(got, Millis(-1));
    for (auto& m : got) {
      ordered = ordered && m.bytes == "r" + std::to_string(seen[m.from]++) + "@" + std::to_string(m.from);
    }
    expect(ordered, "control: replies in order per sender");
  } else {
    while (got.size() < 3) ch.poll(got, Millis(-1));
    bool ordered = true;
    for (int k = 0; k < 3; ++k) {
      ordered = ordered && got[k].from == 0 && got[k].bytes == "m" + std::to_string(k) + "@" + std::to_string(me);
    }
    expect(ordered, "control: messages in order");
    for (int k = 0; k < 3; ++k) ch.send(0, "r" + std::to_string(k) + "@" + std::to_string(me));
  }
  got.clear();
  // Large messages crossing: rank 0 and every other rank send 4 MiB to each other at once.
  std::string big(4 << 20, 'x');
  if (me == 0) {
    for (int r = 1; r < n; ++r) ch.send(r, big + std::to_string(r));
    while (got.size() < static_cast<size_t>(n - 1)) ch.poll(got, Millis(-1));
    bool ok = true;
    for (auto& m : got) ok = ok && m.bytes == big + "up" + std::to_string(m.from);
    expect(ok, "control: crossing large messages (rank 0)");
  } else {
    ch.send(0, big + "up" + std::to_string(me));
    while (got.empty()) ch.poll(got, Millis(-1));
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
  expect(got.empty() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5), "control: wakeup");
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
    expect(got[0].from == 0 && got[0].bytes == "while spinning", "control: message seen while spinning");
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
  expect(a.secret.size() == 64 && a.secret.find_first_not_of("0123456789abcdef") == std::string::npos,
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
    expect(insider.get("rank/0", Millis(1000)) == a.secret, "bootstrap: the secret opens the store");
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
    expect(controllerName == "mpi" ? controlOnMpi : controlOnTcp, label + ": control on " + controllerName);
    int one = 1;
    c.world->allreduce(&one, 1, DataType::Int32, ReduceOp::Sum);
    expect(one == gSize, label + ": allreduce");
    std::vector<ControlChannel::Message> got;
    if (gRank == 0) {
      while (got.size() < static_cast<size_t>(gSize - 1)) c.control->poll(got, Millis(-1));
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
  while (got.size() < static_cast<size_t>(ch.size() - 1)) ch.poll(got, Millis(-1));
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
    expectThrows([&] { ch.poll(got, Millis(500)); }, "control: an unmatched send times out in poll()");
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
  for (size_t maxCount : {size_t(INT_MAX), size_t(7)}) {
    std::string label = maxCount == INT_MAX ? "world" : "world/max7";
    mpi::MpiCommunicator world(dupWorld(), gRank, maxCount);
    testCollectives(world, label);
    std::vector<int> all(gSize);
    for (int i = 0; i < gSize; ++i) all[i] = i;
    testCollectives(*world.subset(all), label + "/subset-all");
    if (gSize > 2) {
      // The odd ranks and, separately, the even ranks, created concurrently.
      std::vector<int> part;
      for (int i = gRank % 2; i < gSize; i += 2) part.push_back(i);
      auto sub = world.subset(part);
      expect(sub->size() == static_cast<int>(part.size()) && sub->rank() == gRank / 2, label + " subset rank");
      testCollectives(*sub, label + "/parity");
    }
    expectThrows([&] { world.subset({gSize}); }, label + " subset outside");
  }
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
}  // namespace hora

int main() {
  try {
    hora::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: unexpected error: %s\n", hora::gRank, e.what());
    ++hora::gFailed;
  }
  int counts[2] = {hora::gPassed, hora::gFailed}, total[2] = {0, 0};
  MPI_Reduce(counts, total, 2, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
  if (hora::gRank == 0) {
    std::printf("mpi transport driver (%d ranks): %d passed, %d failed\n", hora::gSize, total[0], total[1]);
  }
  return hora::gFailed == 0 ? 0 : 1;
}
