// Emulated NCCL: the subset of libnccl's C API that Hora calls, with the real names, signatures
// and enum values. The ranks of a communicator are processes that map one shared-memory segment,
// named from the unique id: each rank writes its contribution into its own slot, a barrier lets
// every rank read every slot, a second barrier frees the slots for the next operation. Operations
// run on the stream's worker thread (tests/gpu_emulation/emulated_cuda.cc), in stream order.
//
// Fault injection, for tests: HORA_EMU_NCCL_FAULT="<kind>:<rank>:<n>" makes the n-th operation
// group (1-based) that comm rank <rank> submits misbehave. kind "stall": that rank never arrives
// (a hung or dead peer); its stream stays blocked until the communicator is aborted. kind "error":
// the operation fails and ncclCommGetAsyncError reports ncclSystemError. An aborted communicator
// marks the segment, and its peers' pending operations then fail with ncclRemoteError (as NCCL
// reports a peer that went away). Two more kinds act when a communicator is made, and end the
// process (exit status 4) as a member that died before joining: "absent:<rank>:<n>", the n-th
// ncclCommInitRank(Config) of this process when it is comm rank <rank> there; "noid:0:<n>", the
// n-th ncclGetUniqueId of this process (before the id is published: only comm rank 0 makes ids).
//
// Communicator creation: ncclCommInitRank blocks until every rank joined (bounded by
// HORA_EMU_INIT_TIMEOUT_MS so that a test never hangs). ncclCommInitRankConfig with
// config->blocking = 0 returns ncclInProgress at once and completes on a thread of its own;
// ncclCommGetAsyncError says ncclInProgress until then, and ncclCommAbort ends it. A non-blocking
// communicator's ncclGroupEnd answers ncclInProgress (settled at once), as NCCL may.
// HORA_EMU_NCCL_VERSION sets the version reported (default 2.23.3).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/gpu_emulation/emulated_cuda.h"

namespace {

constexpr int kMaxRanks = 64;
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kTableBytes = kMaxRanks * 2 * sizeof(uint64_t);  // p2p: offset, bytes per peer
constexpr uint32_t kMagic = 0x484f5241;

enum Result : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};
enum DataType : int {
  ncclInt8 = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclFloat32 = 7,
  ncclFloat64 = 8,
  ncclBfloat16 = 9,
};
enum RedOp : int { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 };

struct Segment {
  uint32_t magic;
  int32_t nranks;
  uint64_t slotBytes;
  std::atomic<int32_t> joined;
  std::atomic<int32_t> abortedBy;  // comm rank + 1 of the rank that aborted; 0 = none
  std::atomic<uint64_t> arrived[kMaxRanks];
};
static_assert(sizeof(Segment) <= kHeaderBytes, "segment header too large");

size_t typeSize(int t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    default: return 8;
  }
}

}  // namespace

struct ncclComm {
  int rank = 0;
  int nranks = 0;
  Segment* seg = nullptr;
  uint8_t* slots = nullptr;
  size_t mapBytes = 0;
  uint64_t round = 0;   // barriers passed: stream worker only
  uint64_t groups = 0;  // groups submitted: host side
  std::atomic<int> asyncError{ncclSuccess};
  std::atomic<bool> aborted{false};
  std::atomic<int> inFlight{0};  // tasks queued on streams that use this comm
  bool nonblocking = false;
  std::string name;                 // of the segment, until every rank joined
  std::thread joining;              // non-blocking init: waits for the other ranks
  std::atomic<bool> cancel{false};  // ncclCommAbort during a non-blocking init

  uint8_t* slot(int r) const { return slots + static_cast<size_t>(r) * seg->slotBytes; }
};

namespace {

struct ncclUniqueIdBytes {
  char internal[128];
};

// ---- element types and reductions ----

float halfToFloat(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(static_cast<float>(man | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t floatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  if (std::isnan(f)) return sign | 0x7e00;
  float a = std::fabs(f);
  if (a >= 65520.0f) return sign | 0x7c00;
  if (a < std::ldexp(1.0f, -14)) {  // subnormal: units of 2^-24, rounded to nearest even
    float units = std::nearbyint(a * std::ldexp(1.0f, 24));
    return sign | static_cast<uint16_t>(units);
  }
  int e;
  float m = std::frexp(a, &e);                       // a = m * 2^e, m in [0.5, 1)
  float scaled = std::nearbyint(std::ldexp(m, 11));  // 11 significant bits
  if (scaled >= 2048.0f) {
    scaled /= 2;
    ++e;
  }
  uint16_t exp = static_cast<uint16_t>(e - 1 + 15);
  return sign | static_cast<uint16_t>(exp << 10) | (static_cast<uint16_t>(scaled) & 0x3ff);
}

float bf16ToFloat(uint16_t b) {
  uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t floatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

template <typename A>
A combine(int op, A a, A b) {
  switch (op) {
    case ncclProd: return a * b;
    case ncclMax: return std::max(a, b);
    case ncclMin: return std::min(a, b);
    default: return a + b;
  }
}

// Integers wrap like the hardware's: added and multiplied as unsigned.
template <typename T>
T combineInt(int op, T a, T b) {
  using U = std::make_unsigned_t<T>;
  if (op == ncclSum || op == ncclAvg) return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  if (op == ncclProd) return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  return combine(op, a, b);
}

template <typename T>
void reduceInts(int op, size_t count, const std::vector<const void*>& in, void* out, int n) {
  auto* o = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) {
    T acc = static_cast<const T*>(in[0])[i];
    for (size_t k = 1; k < in.size(); ++k)
      acc = combineInt(op, acc, static_cast<const T*>(in[k])[i]);
    o[i] = op == ncclAvg ? static_cast<T>(acc / static_cast<T>(n)) : acc;
  }
}

template <typename T, typename A, A (*load)(T), T (*store)(A)>
void reduceFloats(int op, size_t count, const std::vector<const void*>& in, void* out, int n) {
  auto* o = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) {
    A acc = load(static_cast<const T*>(in[0])[i]);
    for (size_t k = 1; k < in.size(); ++k)
      acc = combine(op, acc, load(static_cast<const T*>(in[k])[i]));
    if (op == ncclAvg) acc /= static_cast<A>(n);
    o[i] = store(acc);
  }
}

template <typename T>
T same(T v) {
  return v;
}

// `in` are the ranks' inputs in rank order; every rank computes the same result.
void reduce(int dtype, int op, size_t count, const std::vector<const void*>& in, void* out, int n) {
  switch (dtype) {
    case ncclInt8: reduceInts<int8_t>(op, count, in, out, n); break;
    case ncclUint8: reduceInts<uint8_t>(op, count, in, out, n); break;
    case ncclInt32: reduceInts<int32_t>(op, count, in, out, n); break;
    case ncclUint32: reduceInts<uint32_t>(op, count, in, out, n); break;
    case ncclInt64: reduceInts<int64_t>(op, count, in, out, n); break;
    case ncclUint64: reduceInts<uint64_t>(op, count, in, out, n); break;
    case ncclFloat16:
      reduceFloats<uint16_t, float, halfToFloat, floatToHalf>(op, count, in, out, n);
      break;
    case ncclBfloat16:
      reduceFloats<uint16_t, float, bf16ToFloat, floatToBf16>(op, count, in, out, n);
      break;
    case ncclFloat32:
      reduceFloats<float, float, same<float>, same<float>>(op, count, in, out, n);
      break;
    default: reduceFloats<double, double, same<double>, same<double>>(op, count, in, out, n); break;
  }
}

// ---- fault injection ----

struct Fault {
  char kind = 0;  // 's'tall, 'e'rror, 'a'bsent or 'n'oid
  int rank = -1;
  uint64_t group = 0;
};

const Fault& fault() {
  static const Fault f = [] {
    Fault f;
    const char* v = std::getenv("HORA_EMU_NCCL_FAULT");
    if (v == nullptr) return f;
    char kind[16] = {0};
    unsigned long long n = 0;
    if (std::sscanf(v, "%15[a-z]:%d:%llu", kind, &f.rank, &n) == 3) {
      f.kind = kind[0];
      f.group = n;
    }
    return f;
  }();
  return f;
}

// A member that dies before it joins: ends this process, as the fault asks.
void dieIf(char kind, int rank, uint64_t nth) {
  const Fault& f = fault();
  if (f.kind == kind && (kind == 'n' || f.rank == rank) && f.group == nth) {
    std::fprintf(stderr, "emulated NCCL: fault %c: this process exits before joining\n", kind);
    std::fflush(stderr);
    _exit(4);
  }
}

// ---- rendezvous ----

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::atoi(v) : fallback;
}

std::string segmentName(const ncclUniqueIdBytes& id) {
  static const char* hex = "0123456789abcdef";
  std::string name = "/hora-emu-nccl-";
  for (int i = 0; i < 16; ++i) {
    auto b = static_cast<unsigned char>(id.internal[i]);
    name += hex[b >> 4];
    name += hex[b & 15];
  }
  return name;
}

bool peerAborted(ncclComm* c) { return c->aborted.load() || c->seg->abortedBy.load() != 0; }

// Every rank arrives; false when the communicator (or a peer's) was aborted first. Sleeps in
// growing steps: four ranks share two cores in CI.
bool barrier(ncclComm* c) {
  uint64_t round = ++c->round;
  c->seg->arrived[c->rank].store(round);
  auto pause = std::chrono::microseconds(10);
  for (;;) {
    bool all = true;
    for (int r = 0; r < c->nranks && all; ++r) all = c->seg->arrived[r].load() >= round;
    if (all) return true;
    if (peerAborted(c) || hora_emu::shuttingDown()) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
}

// ---- operations and groups ----

enum class Kind { AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, Send, Recv };

struct Op {
  Kind kind;
  const void* send;
  void* recv;
  size_t count;
  int dtype;
  int redOp;
  int peer;  // root for Broadcast and Reduce
};

struct Pending {
  ncclComm* comm = nullptr;
  hora_emu::Stream* stream = nullptr;
  std::vector<Op> ops;
};

// Initial-exec TLS: the library is dlopen'ed, and LeakSanitizer's scan of dynamic TLS blocks
// crashes on some layouts ("Tracer caught signal 11"); a few bytes of static TLS avoid it.
#define HORA_EMU_STATIC_TLS __attribute__((tls_model("initial-exec")))
HORA_EMU_STATIC_TLS thread_local int tGroupDepth = 0;
HORA_EMU_STATIC_TLS thread_local std::vector<Pending> tGroup;

// One collective: contributions in, barrier, results out, barrier.
bool runCollective(ncclComm* c, const Op& op) {
  const size_t elem = typeSize(op.dtype), n = static_cast<size_t>(c->nranks);
  size_t inBytes = op.count * elem;
  if (op.kind == Kind::ReduceScatter) inBytes *= n;
  if (op.kind == Kind::Broadcast && c->rank != op.peer) inBytes = 0;
  if (inBytes > c->seg->slotBytes) {
    std::fprintf(stderr, "emulated NCCL: %zu bytes exceed the slot of %llu (HORA_EMU_SLOT_MB)\n",
                 inBytes, static_cast<unsigned long long>(c->seg->slotBytes));
    c->asyncError = ncclInvalidUsage;
    return false;
  }
  if (inBytes > 0) std::memcpy(c->slot(c->rank), op.send, inBytes);
  if (!barrier(c)) return false;
  std::vector<const void*> in(n);
  switch (op.kind) {
    case Kind::AllReduce:
    case Kind::Reduce:
      if (op.kind == Kind::Reduce && c->rank != op.peer) break;
      for (size_t r = 0; r < n; ++r) in[r] = c->slot(static_cast<int>(r));
      reduce(op.dtype, op.redOp, op.count, in, op.recv, c->nranks);
      break;
    case Kind::ReduceScatter:
      for (size_t r = 0; r < n; ++r)
        in[r] = c->slot(static_cast<int>(r)) + c->rank * op.count * elem;
      reduce(op.dtype, op.redOp, op.count, in, op.recv, c->nranks);
      break;
    case Kind::Broadcast:
      if (op.count > 0) std::memmove(op.recv, c->slot(op.peer), op.count * elem);
      break;
    case Kind::AllGather:
      for (size_t r = 0; r < n; ++r) {
        if (op.count > 0) {
          std::memcpy(static_cast<uint8_t*>(op.recv) + r * op.count * elem,
                      c->slot(static_cast<int>(r)), op.count * elem);
        }
      }
      break;
    default: break;
  }
  return barrier(c);
}

// The sends and receives of one group: every rank posts its sends in its slot (a table of offset
// and size per destination, then the data), then reads what its peers posted for it. Every rank
// of the communicator takes part, as in Hora's alltoall; one send per pair and group.
bool runPointToPoint(ncclComm* c, const std::vector<Op>& ops) {
  uint8_t* mine = c->slot(c->rank);
  auto* table = reinterpret_cast<uint64_t*>(mine);
  std::memset(table, 0, kTableBytes);
  size_t off = kTableBytes;
  for (const Op& op : ops) {
    if (op.kind != Kind::Send) continue;
    size_t bytes = op.count * typeSize(op.dtype);
    if (off + bytes > c->seg->slotBytes) {
      c->asyncError = ncclInvalidUsage;
      return false;
    }
    if (bytes > 0) std::memcpy(mine + off, op.send, bytes);
    table[2 * op.peer] = off;
    table[2 * op.peer + 1] = bytes;
    off += bytes;
  }
  if (!barrier(c)) return false;
  for (const Op& op : ops) {
    if (op.kind != Kind::Recv) continue;
    const uint8_t* theirs = c->slot(op.peer);
    auto* t = reinterpret_cast<const uint64_t*>(theirs);
    size_t bytes = std::min<size_t>(t[2 * c->rank + 1], op.count * typeSize(op.dtype));
    if (bytes > 0) std::memcpy(op.recv, theirs + t[2 * c->rank], bytes);
  }
  return barrier(c);
}

void runGroup(ncclComm* c, const std::vector<Op>& ops, char fault) {
  if (c->aborted.load() || c->asyncError.load() != ncclSuccess) return;
  if (fault == 's') {
    while (!c->aborted.load() && !hora_emu::shuttingDown()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return;
  }
  if (fault == 'e') {
    c->asyncError = ncclSystemError;
    return;
  }
  bool ok = true, p2p = false;
  for (const Op& op : ops) {
    if (op.kind == Kind::Send || op.kind == Kind::Recv) {
      p2p = true;
    } else if (ok) {
      ok = runCollective(c, op);
    }
  }
  if (ok && p2p) ok = runPointToPoint(c, ops);
  if (!ok && c->asyncError.load() == ncclSuccess && !c->aborted.load()) {
    c->asyncError = ncclRemoteError;
  }
}

void submit(Pending p) {
  ncclComm* c = p.comm;
  const Fault& f = fault();
  uint64_t n = ++c->groups;
  bool here = (f.kind == 's' || f.kind == 'e') && f.rank == c->rank && f.group == n;
  char kind = here ? f.kind : 0;
  ++c->inFlight;
  hora_emu::enqueueTask(p.stream, [c, ops = std::move(p.ops), kind] {
    runGroup(c, ops, kind);
    --c->inFlight;
  });
}

int post(ncclComm* c, void* stream, Op op) {
  if (c == nullptr) return ncclInvalidArgument;
  if (op.peer < 0 || op.peer >= c->nranks) {
    if (op.kind != Kind::AllReduce && op.kind != Kind::AllGather &&
        op.kind != Kind::ReduceScatter) {
      return ncclInvalidArgument;
    }
  }
  if (op.dtype < ncclInt8 || op.dtype > ncclBfloat16 || op.redOp < ncclSum || op.redOp > ncclAvg) {
    return ncclInvalidArgument;
  }
  auto* s = static_cast<hora_emu::Stream*>(stream);
  if (tGroupDepth == 0) {
    submit(Pending{c, s, {op}});
    return ncclSuccess;
  }
  for (auto& p : tGroup) {
    if (p.comm == c && p.stream == s) {
      p.ops.push_back(op);
      return ncclSuccess;
    }
  }
  tGroup.push_back(Pending{c, s, {op}});
  return ncclSuccess;
}

}  // namespace

extern "C" {

typedef int ncclResult_t;
typedef ncclComm* ncclComm_t;
typedef ncclUniqueIdBytes ncclUniqueId;

ncclResult_t ncclGetVersion(int* version) {
  *version = envInt("HORA_EMU_NCCL_VERSION", 22303);
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error (emulated fault)";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  static std::atomic<uint64_t> made{0};
  dieIf('n', 0, ++made);
  std::memset(id->internal, 0, sizeof(id->internal));
  std::random_device rd;
  for (int i = 0; i < 16; i += 4) {
    uint32_t v = rd();
    std::memcpy(id->internal + i, &v, 4);
  }
  return ncclSuccess;
}

// Maps the id's segment and counts this rank in; the caller waits for the others.
static ncclResult_t joinSegment(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank) {
  if (nranks < 1 || nranks > kMaxRanks || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  static std::atomic<uint64_t> inits{0};
  dieIf('a', rank, ++inits);
  const size_t slotBytes = static_cast<size_t>(envInt("HORA_EMU_SLOT_MB", 64)) << 20;
  const size_t mapBytes = kHeaderBytes + slotBytes * static_cast<size_t>(nranks);
  std::string name = segmentName(id);
  int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0) return ncclSystemError;
  if (ftruncate(fd, static_cast<off_t>(mapBytes)) != 0) {
    close(fd);
    return ncclSystemError;
  }
  void* p = mmap(nullptr, mapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return ncclSystemError;
  auto* c = new ncclComm();
  c->rank = rank;
  c->nranks = nranks;
  c->seg = static_cast<Segment*>(p);
  c->slots = static_cast<uint8_t*>(p) + kHeaderBytes;
  c->mapBytes = mapBytes;
  c->name = name;
  c->seg->magic = kMagic;
  c->seg->nranks = nranks;
  c->seg->slotBytes = slotBytes;
  c->seg->joined.fetch_add(1);
  *out = c;
  return ncclSuccess;
}

// Waits until every rank joined (NCCL's init is collective): true, or false past
// HORA_EMU_INIT_TIMEOUT_MS or once the init is cancelled. Rank 0 then removes the name (every
// rank has it mapped); a failed init removes it too, so that none is left behind.
static bool awaitMembers(ncclComm_t c) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::milliseconds(envInt("HORA_EMU_INIT_TIMEOUT_MS", 60000));
  while (c->seg->joined.load() < c->nranks) {
    if (c->cancel.load() || std::chrono::steady_clock::now() > deadline) {
      shm_unlink(c->name.c_str());
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (c->rank == 0) shm_unlink(c->name.c_str());
  return true;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  ncclComm_t c = nullptr;
  ncclResult_t r = joinSegment(&c, nranks, id, rank);
  if (r != ncclSuccess) return r;
  if (!awaitMembers(c)) {
    munmap(c->seg, c->mapBytes);
    delete c;
    return ncclSystemError;
  }
  *out = c;
  return ncclSuccess;
}

// NCCL's ncclConfig_t begins with size, magic and version (NCCL_CONFIG_INITIALIZER); `blocking`
// follows from 2.14 on.
struct ncclConfigHead {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
};

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank,
                                    ncclConfigHead* config) {
  if (config != nullptr && (config->magic != 0xcafebeef || config->version < 21400 ||
                            config->size < sizeof(ncclConfigHead))) {
    std::fprintf(stderr, "emulated NCCL: ncclConfig_t not filled as NCCL_CONFIG_INITIALIZER\n");
    return ncclInvalidArgument;
  }
  if (config == nullptr || config->blocking != 0) return ncclCommInitRank(out, nranks, id, rank);
  ncclComm_t c = nullptr;
  ncclResult_t r = joinSegment(&c, nranks, id, rank);
  if (r != ncclSuccess) return r;
  c->nonblocking = true;
  c->asyncError = ncclInProgress;
  c->joining =
      std::thread([c] { c->asyncError = awaitMembers(c) ? ncclSuccess : ncclSystemError; });
  *out = c;
  return ncclInProgress;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* result) {
  if (comm == nullptr) return ncclInvalidArgument;
  *result = comm->asyncError.load();
  return ncclSuccess;
}

// Marks the communicator (and, for the peers, the segment) aborted, then waits for the streams
// to leave its operations, which now return at once.
static void releaseComm(ncclComm_t comm, bool abort) {
  if (comm->joining.joinable()) {
    comm->cancel = true;
    comm->joining.join();
  }
  if (abort) {
    comm->aborted = true;
    int32_t none = 0;
    comm->seg->abortedBy.compare_exchange_strong(none, comm->rank + 1);
  }
  while (comm->inFlight.load() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  munmap(comm->seg, comm->mapBytes);
  delete comm;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  releaseComm(comm, true);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  releaseComm(comm, false);
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  ++tGroupDepth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (tGroupDepth == 0) return ncclInvalidUsage;
  if (--tGroupDepth > 0) return ncclSuccess;
  std::vector<Pending> group;
  group.swap(tGroup);
  bool nonblocking = false;
  for (auto& p : group) {
    nonblocking = nonblocking || p.comm->nonblocking;
    submit(std::move(p));
  }
  return nonblocking ? ncclInProgress : ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, int dtype, int op,
                           ncclComm_t comm, void* stream) {
  return post(comm, stream, Op{Kind::AllReduce, send, recv, count, dtype, op, -1});
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, int dtype, int root,
                           ncclComm_t comm, void* stream) {
  return post(comm, stream, Op{Kind::Broadcast, send, recv, count, dtype, ncclSum, root});
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, int dtype, int op, int root,
                        ncclComm_t comm, void* stream) {
  return post(comm, stream, Op{Kind::Reduce, send, recv, count, dtype, op, root});
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t sendCount, int dtype,
                           ncclComm_t comm, void* stream) {
  return post(comm, stream, Op{Kind::AllGather, send, recv, sendCount, dtype, ncclSum, -1});
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t recvCount, int dtype, int op,
                               ncclComm_t comm, void* stream) {
  return post(comm, stream, Op{Kind::ReduceScatter, send, recv, recvCount, dtype, op, -1});
}

ncclResult_t ncclSend(const void* send, size_t count, int dtype, int peer, ncclComm_t comm,
                      void* stream) {
  return post(comm, stream, Op{Kind::Send, send, nullptr, count, dtype, ncclSum, peer});
}

ncclResult_t ncclRecv(void* recv, size_t count, int dtype, int peer, ncclComm_t comm,
                      void* stream) {
  return post(comm, stream, Op{Kind::Recv, nullptr, recv, count, dtype, ncclSum, peer});
}

}  // extern "C"
