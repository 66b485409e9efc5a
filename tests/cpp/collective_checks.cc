#include "tests/cpp/collective_checks.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#include "core/collectives/algorithm_table.h"
#include "tests/cpp/reference_values.h"

namespace hora {
namespace test {
namespace {

const DataType kDtypes[] = {DataType::UInt8,   DataType::Int8,     DataType::UInt16,
                            DataType::Int16,   DataType::Int32,    DataType::Int64,
                            DataType::Float16, DataType::BFloat16, DataType::Float32,
                            DataType::Float64, DataType::Bool};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};
// 0, 1, odd, and not divisible by 2, 3, 4 or 7 (1003 = 17 * 59).
const size_t kSmallCounts[] = {0, 1, 17, 1003};

const char* opName(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "Sum";
    case ReduceOp::Min: return "Min";
    case ReduceOp::Max: return "Max";
    case ReduceOp::Product: return "Product";
    case ReduceOp::Average: return "Average";
    case ReduceOp::Adasum: return "Adasum";
  }
  return "?";
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
  return h;
}

// Every case draws its own data.
uint64_t seedOf(const Case& c) { return fnv1a(fullCaseName(c)); }

std::vector<int> membersOf(const Communicator& comm, const CheckContext& context) {
  if (!context.members.empty()) return context.members;
  std::vector<int> m(comm.size());
  std::iota(m.begin(), m.end(), 0);
  return m;
}

std::string where(const Communicator& comm) {
  return "rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) + ": ";
}

// Ranks running as threads ask for the same reference at the same time: it is computed once.
std::shared_ptr<const Bytes> sharedReduction(uint64_t seed, const std::vector<int>& members,
                                             size_t count, DataType dtype, ReduceOp op,
                                             ValueKind kind) {
  static std::mutex mutex;
  static std::string lastKey;
  static std::shared_ptr<const Bytes> last;
  std::string key = std::to_string(seed) + "/" + std::to_string(count) + "/" +
                    std::to_string(int(dtype)) + "/" + std::to_string(int(op)) + "/" +
                    (kind.orderRevealing ? "r" : "e") + (kind.integersWrap ? "w" : "s");
  for (int m : members) key += "/" + std::to_string(m);
  std::lock_guard<std::mutex> lock(mutex);
  if (key != lastKey || !last) {
    last.reset();  // frees the previous (possibly large) reference first
    last = std::make_shared<const Bytes>(referenceReduction(seed, members, count, dtype, op, kind));
    lastKey = key;
  }
  return last;
}

std::vector<size_t> prefixSums(const std::vector<size_t>& v) {
  std::vector<size_t> at(v.size() + 1, 0);
  for (size_t i = 0; i < v.size(); ++i) at[i + 1] = at[i] + v[i];
  return at;
}

Bytes pattern(uint64_t seed, int tag, size_t bytes) {
  Bytes b(bytes);
  for (size_t i = 0; i < bytes; ++i) b[i] = patternByte(seed, tag, i);
  return b;
}

std::string compareBytes(const Bytes& got, const Bytes& want, const std::string& what) {
  std::string diff = compareElements(got.data(), want.data(), want.size(), DataType::UInt8);
  return diff.empty() ? "" : what + ": byte " + diff;
}

// ---- one check per collective ----------------------------------------------------------------

std::string checkAllreduce(Communicator& comm, const Case& c, const CheckContext& context) {
  const std::vector<int> members = membersOf(comm, context);
  ValueKind kind;
  kind.orderRevealing = context.rankOrderedFloats && isFloating(c.dtype) &&
                        (c.op == ReduceOp::Sum || c.op == ReduceOp::Product);
  kind.integersWrap = context.integersWrap;
  const uint64_t seed = seedOf(c);
  Bytes buf = makeValues(seed, members[comm.rank()], c.count, c.dtype, c.op, kind);
  comm.allreduce(buf.data(), c.count, c.dtype, c.op);
  auto want = sharedReduction(seed, members, c.count, c.dtype, c.op, kind);
  std::string diff = compareElements(buf.data(), want->data(), c.count, c.dtype);
  return diff.empty() ? "" : where(comm) + "allreduce: " + diff;
}

std::string checkReduceScatter(Communicator& comm, const Case& c, const CheckContext& context) {
  const std::vector<int> members = membersOf(comm, context);
  const int n = comm.size(), r = comm.rank();
  // Uneven blocks, rank 1's empty.
  std::vector<size_t> counts(n);
  for (int i = 0; i < n; ++i) counts[i] = i == 1 ? 0 : c.count + static_cast<size_t>(i) * 3;
  const std::vector<size_t> at = prefixSums(counts);
  const size_t total = at[n], es = dtypeSize(c.dtype);
  const uint64_t seed = seedOf(c);
  ValueKind kind;
  kind.integersWrap = context.integersWrap;
  const Bytes original = makeValues(seed, members[r], total, c.dtype, c.op, kind);
  Bytes in = original;
  Bytes out(counts[r] * es, 0x5a);
  comm.reduceScatter(in.data(), out.data(), counts, c.dtype, c.op);
  auto all = sharedReduction(seed, members, total, c.dtype, c.op, kind);
  std::string diff = compareElements(out.data(), all->data() + at[r] * es, counts[r], c.dtype);
  if (!diff.empty()) return where(comm) + "reducescatter: " + diff;
  if (in != original) return where(comm) + "reducescatter modified its input";
  return "";
}

std::string checkAllgatherv(Communicator& comm, const Case& c, const CheckContext& context) {
  const std::vector<int> members = membersOf(comm, context);
  const int n = comm.size(), r = comm.rank();
  std::vector<size_t> bytes(n);
  for (int i = 0; i < n; ++i) bytes[i] = (i % 3 == 1) ? 0 : c.count + static_cast<size_t>(i) * 5;
  const std::vector<size_t> at = prefixSums(bytes);
  const uint64_t seed = seedOf(c);
  Bytes out(at[n], 0xee);
  Bytes own = pattern(seed, members[r], bytes[r]);
  if (c.inPlace) {
    if (bytes[r] > 0) std::memcpy(out.data() + at[r], own.data(), bytes[r]);
    comm.allgatherv(out.data() + at[r], out.data(), bytes);
  } else {
    comm.allgatherv(own.data(), out.data(), bytes);
  }
  for (int j = 0; j < n; ++j) {
    Bytes block(out.begin() + at[j], out.begin() + at[j + 1]);
    std::string diff = compareBytes(block, pattern(seed, members[j], bytes[j]),
                                    "allgatherv: block of rank " + std::to_string(j));
    if (!diff.empty()) return where(comm) + diff;
  }
  return "";
}

std::string checkBroadcast(Communicator& comm, const Case& c, const CheckContext&) {
  const uint64_t seed = seedOf(c);
  Bytes want = pattern(seed, c.root, c.count);
  Bytes buf = comm.rank() == c.root ? want : Bytes(c.count, 0xaa);
  comm.broadcast(buf.data(), c.count, c.root);
  std::string diff = compareBytes(buf, want, "broadcast");
  return diff.empty() ? "" : where(comm) + diff;
}

std::string checkAlltoallv(Communicator& comm, const Case& c, const CheckContext& context) {
  const std::vector<int> members = membersOf(comm, context);
  const int n = comm.size(), r = comm.rank();
  // Uneven, some empty: rank `from` sends ((from + 2 to) % 4) units (+1 byte to itself).
  auto amount = [&](int from, int to) {
    return static_cast<size_t>((from + 2 * to) % 4) * c.count + (from == to ? 1 : 0);
  };
  auto tag = [&](int from, int to) { return members[from] * 1024 + members[to]; };
  const uint64_t seed = seedOf(c);
  std::vector<size_t> send(n), recv(n);
  Bytes in;
  for (int j = 0; j < n; ++j) {
    send[j] = amount(r, j);
    recv[j] = amount(j, r);
    Bytes block = pattern(seed, tag(r, j), send[j]);
    in.insert(in.end(), block.begin(), block.end());
  }
  const std::vector<size_t> at = prefixSums(recv);
  Bytes out(at[n], 0xcc);
  comm.alltoallv(in.data(), send, out.data(), recv);
  for (int j = 0; j < n; ++j) {
    Bytes block(out.begin() + at[j], out.begin() + at[j + 1]);
    std::string diff = compareBytes(block, pattern(seed, tag(j, r), recv[j]),
                                    "alltoallv: block from rank " + std::to_string(j));
    if (!diff.empty()) return where(comm) + diff;
  }
  return "";
}

std::string checkSendRecv(Communicator& comm, const Case& c, const CheckContext& context) {
  const std::vector<int> members = membersOf(comm, context);
  const int n = comm.size(), r = comm.rank();
  const uint64_t seed = seedOf(c);
  // A ring shift: send to the next rank, receive from the previous one, at once.
  const int to = (r + 1) % n, from = (r + n - 1) % n;
  Bytes out = pattern(seed, members[r], c.count), in(c.count, 0);
  comm.sendRecv(to, out.data(), c.count, from, in.data(), c.count);
  std::string diff = compareBytes(in, pattern(seed, members[from], c.count), "sendrecv ring shift");
  if (!diff.empty()) return where(comm) + diff;
  // Only send or only receive, pairing even ranks with the next odd one.
  if (n % 2 == 0) {
    Bytes got(c.count, 0);
    if (r % 2 == 0) {
      comm.sendRecv(r + 1, out.data(), c.count, 0, nullptr, 0);
    } else {
      comm.sendRecv(0, nullptr, 0, r - 1, got.data(), c.count);
      diff = compareBytes(got, pattern(seed, members[r - 1], c.count), "sendrecv one-sided");
      if (!diff.empty()) return where(comm) + diff;
    }
  }
  // With itself.
  Bytes back(c.count, 0);
  comm.sendRecv(r, out.data(), c.count, r, back.data(), c.count);
  diff = compareBytes(back, out, "sendrecv with itself");
  return diff.empty() ? "" : where(comm) + diff;
}

// No rank leaves the barrier before every rank entered it. Each rank leaves a mark in the store
// before entering; the late rank first waits a while, so a barrier that lets ranks through early
// shows as a missing mark. Only the order is asserted, never how long anything took.
std::string checkBarrier(Communicator& comm, const Case& c, const CheckContext& context) {
  if (context.store == nullptr) return where(comm) + "barrier: the check needs a store";
  const int n = comm.size(), r = comm.rank();
  auto mark = [&](int rank) { return context.storePrefix + "/entered/" + std::to_string(rank); };
  if (r == c.root) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  context.store->set(mark(r), "1");
  comm.barrier();
  std::string missing;
  for (int j = 0; j < n; ++j) {
    if (!context.store->check({mark(j)})) missing += " " + std::to_string(j);
  }
  return missing.empty()
             ? ""
             : where(comm) + "left the barrier before rank(s)" + missing + " entered it";
}

}  // namespace

const char* collectiveName(Collective c) {
  switch (c) {
    case Collective::Allreduce: return "Allreduce";
    case Collective::ReduceScatter: return "ReduceScatter";
    case Collective::Allgatherv: return "Allgatherv";
    case Collective::Broadcast: return "Broadcast";
    case Collective::Alltoallv: return "Alltoallv";
    case Collective::Barrier: return "Barrier";
    case Collective::SendRecv: return "SendRecv";
  }
  return "?";
}

std::string caseName(const Case& c) {
  std::string s = "np" + std::to_string(c.ranks);
  switch (c.collective) {
    case Collective::Allreduce:
    case Collective::ReduceScatter:
      return s + "_count" + std::to_string(c.count) + "_" + dtypeName(c.dtype) + "_" + opName(c.op);
    case Collective::Allgatherv:
      return s + "_bytes" + std::to_string(c.count) + (c.inPlace ? "_inplace" : "_outofplace");
    case Collective::Broadcast:
      return s + "_bytes" + std::to_string(c.count) + "_root" + std::to_string(c.root);
    case Collective::Alltoallv:
    case Collective::SendRecv: return s + "_bytes" + std::to_string(c.count);
    case Collective::Barrier: return s + "_late" + std::to_string(c.root);
  }
  return s;
}

std::string fullCaseName(const Case& c) {
  return std::string(collectiveName(c.collective)) + "/" + caseName(c);
}

size_t multiSegmentCount(int ranks, DataType dtype) {
  // Two segments per rank's block, plus a remainder that no size divides.
  return 2 * static_cast<size_t>(ranks) * collectives::kRingSegmentBytes / dtypeSize(dtype) + 13;
}

std::vector<Case> matrixCases(Collective collective, int ranks, bool large) {
  std::vector<Case> out;
  Case base;
  base.collective = collective;
  base.ranks = ranks;
  auto add = [&](size_t count, DataType dtype = DataType::UInt8, ReduceOp op = ReduceOp::Sum,
                 int root = 0, bool inPlace = false) {
    Case c = base;
    c.count = count;
    c.dtype = dtype;
    c.op = op;
    c.root = root;
    c.inPlace = inPlace;
    out.push_back(c);
  };
  // Sizes of one rank need no large cases: nothing moves.
  const bool big = large && ranks > 1;
  const size_t seg = collectives::kRingSegmentBytes;
  switch (collective) {
    case Collective::Allreduce:
      for (DataType dt : kDtypes) {
        const size_t es = dtypeSize(dt);
        std::vector<size_t> counts(std::begin(kSmallCounts), std::end(kSmallCounts));
        if (big) {
          // The largest shared payload over shared memory, and the smallest window after it.
          counts.push_back(collectives::sharedPayloadMaxBytes(ranks) / es);
          counts.push_back(collectives::sharedPayloadMaxBytes(ranks) / es + 1);
          // The largest Bruck-ordered buffer (float Sum and Product from 5 ranks on).
          if (ranks >= collectives::kBruckOrderedMinRanks) {
            counts.push_back(collectives::kBruckOrderedMaxBlockBytes * ranks / es);
          }
          counts.push_back(collectives::kAllreduceRingMinBytes / es -
                           1);                             // the last size below the ring
          counts.push_back(multiSegmentCount(ranks, dt));  // ring (or rank order), 2+ segments
        }
        for (ReduceOp op : kOps) {
          for (size_t n : counts) add(n, dt, op);
        }
      }
      break;
    case Collective::ReduceScatter:
      for (DataType dt : kDtypes) {
        for (ReduceOp op : kOps) {
          for (size_t n : kSmallCounts) add(n, dt, op);
        }
        // Every block spans 2+ segments; the op changes nothing of how data moves.
        if (big) add(2 * seg / dtypeSize(dt) + 5, dt, ReduceOp::Sum);
      }
      break;
    case Collective::Allgatherv:
      for (bool inPlace : {false, true}) {
        for (size_t n : kSmallCounts) add(n, DataType::UInt8, ReduceOp::Sum, 0, inPlace);
        if (big) add(seg + 77, DataType::UInt8, ReduceOp::Sum, 0, inPlace);
      }
      break;
    case Collective::Broadcast:
      for (int root = 0; root < ranks; ++root) {
        for (size_t n : kSmallCounts) add(n, DataType::UInt8, ReduceOp::Sum, root);
        if (big) {
          add(collectives::kBroadcastChainMinBytes - 1, DataType::UInt8, ReduceOp::Sum,
              root);                                               // the last tree size
          add(3 * seg + 5, DataType::UInt8, ReduceOp::Sum, root);  // chain, 4 segments
          // Through the windows, where a transport has them (many parts).
          add(collectives::kWindowBroadcastMinBytes + 7, DataType::UInt8, ReduceOp::Sum, root);
        }
      }
      break;
    case Collective::Alltoallv:
      for (size_t n : kSmallCounts) add(n);
      if (big) add(seg / 2 + 3);
      break;
    case Collective::SendRecv:
      for (size_t n : kSmallCounts) add(n);
      if (big) add(2 * seg + 1);
      break;
    case Collective::Barrier:
      for (int late = 0; late < ranks; ++late) add(0, DataType::UInt8, ReduceOp::Sum, late);
      break;
  }
  return out;
}

std::vector<Case> allMatrixCases(int ranks, bool large) {
  std::vector<Case> out;
  for (Collective c :
       {Collective::Allreduce, Collective::ReduceScatter, Collective::Allgatherv,
        Collective::Broadcast, Collective::Alltoallv, Collective::Barrier, Collective::SendRecv}) {
    std::vector<Case> some = matrixCases(c, ranks, large);
    out.insert(out.end(), some.begin(), some.end());
  }
  return out;
}

std::string runCase(Communicator& comm, const Case& c, const CheckContext& context) {
  if (comm.size() != c.ranks) {
    return where(comm) + "the case is for " + std::to_string(c.ranks) + " ranks";
  }
  switch (c.collective) {
    case Collective::Allreduce: return checkAllreduce(comm, c, context);
    case Collective::ReduceScatter: return checkReduceScatter(comm, c, context);
    case Collective::Allgatherv: return checkAllgatherv(comm, c, context);
    case Collective::Broadcast: return checkBroadcast(comm, c, context);
    case Collective::Alltoallv: return checkAlltoallv(comm, c, context);
    case Collective::Barrier: return checkBarrier(comm, c, context);
    case Collective::SendRecv: return checkSendRecv(comm, c, context);
  }
  return where(comm) + "unknown collective";
}

}  // namespace test
}  // namespace hora
