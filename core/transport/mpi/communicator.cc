#include "core/transport/mpi/communicator.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/collectives/ring.h"
#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/transport/mpi/mpi_datatypes.h"
#include "core/transport/mpi/mpi_wait.h"
#include "core/transport/rendezvous_store.h"

namespace hora {
namespace mpi {
namespace {

// Exchanges and sendRecv use tags of their own, so point-to-point traffic of one never matches a
// receive posted by the other.
constexpr int kSendRecvTag = 1;
constexpr int kExchangeTag = 2;
constexpr size_t kMaxUnit = size_t(1) << 16;

const uint8_t* bytesOf(const void* p) { return static_cast<const uint8_t*>(p); }
uint8_t* bytesOf(void* p) { return static_cast<uint8_t*>(p); }

std::vector<int> inUnits(const std::vector<size_t>& values, size_t unit) {
  std::vector<int> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = static_cast<int>(values[i] / unit);
  return out;
}

bool overlaps(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return aBytes > 0 && bBytes > 0 && x < y + bBytes && y < x + aBytes;
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, int worldRank, size_t maxCount, Millis timeout)
    : context_(MpiContext::acquire()),
      comm_(comm),
      worldRank_(worldRank),
      // MPI counts are ints: every call moves at most INT_MAX elements, and larger buffers go in
      // chunks.
      maxCount_(std::max<size_t>(1, std::min<size_t>(maxCount, INT_MAX))),
      timeout_(timeout),
      watchdog_(timeout, comm, context_.threadLevel() == MPI_THREAD_MULTIPLE,
                [this](const char* op, const char* call) { return timeoutMessage(op, call); }) {
  // The default handler aborts the job on any error; returning codes lets a failure become an
  // IoError that names the rank and the call.
  checkMpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN),
           prefix("setup") + "MPI_Comm_set_errhandler");
  checkMpi(MPI_Comm_rank(comm_, &rank_), prefix("setup") + "MPI_Comm_rank");
  checkMpi(MPI_Comm_size(comm_, &size_), prefix("setup") + "MPI_Comm_size");
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // After MPI_Finalize no MPI call is allowed, not even a free; the process is ending anyway.
  if (finalized) return;
  for (auto& entry : unitTypes_) MPI_Type_free(&entry.second);
  // Not freed here: MPI could then reuse its context id for a later communicator, which would
  // receive this one's stray messages (mpi_context.h).
  context_.retire(comm_);
}

std::string MpiCommunicator::prefix(const char* op) const {
  return "rank " + std::to_string(worldRank_) + ": mpi " + op + ": ";
}

void MpiCommunicator::check(int rc, const char* op, const char* call) const {
  if (rc == MPI_SUCCESS) return;
  throw IoError(prefix(op) + call + " failed: " + mpiErrorText(rc) +
                " (a peer probably exited or failed; see its log)");
}

template <typename Body>
void MpiCommunicator::run(const char* op, Body&& body) {
  if (!failure_.empty()) {
    throw IoError(prefix(op) + "the communicator failed earlier and cannot be used (" + failure_ +
                  ")");
  }
  try {
    body();
  } catch (const std::exception& e) {
    // MPI cannot cancel a collective that failed on some ranks, so the communicator is unusable
    // afterwards; later calls fail at once with the first reason.
    failure_ = e.what();
    throw;
  }
}

void MpiCommunicator::checkPerRank(const char* op, size_t got) const {
  if (got != static_cast<size_t>(size_)) {
    throw InvalidArgument(prefix(op) + "expected one entry per rank (" + std::to_string(size_) +
                          "), got " + std::to_string(got));
  }
}

void MpiCommunicator::checkPeer(const char* op, int peer) const {
  if (peer < 0 || peer >= size_) {
    throw InvalidArgument(prefix(op) + "rank " + std::to_string(peer) +
                          " is outside the communicator (size " + std::to_string(size_) + ")");
  }
}

void MpiCommunicator::checkElementwise(const char* op, ReduceOp reduceOp) const {
  if (!capabilities().reduces(reduceOp)) {
    throw InvalidArgument(
        prefix(op) + "reduce op " + reduceOpName(reduceOp) +
        " is not element-wise (Average is Sum then scaling; Adasum has its own op)");
  }
}

size_t MpiCommunicator::unitFor(const std::vector<size_t>& counts,
                                const std::vector<size_t>& offsets) const {
  // The smallest power-of-two unit in which every count and offset is a whole number within MPI's
  // int limit: byte counts beyond it are expressed in larger contiguous types.
  for (size_t unit = 1; unit <= kMaxUnit; unit <<= 1) {
    bool fits = true;
    for (const auto* values : {&counts, &offsets}) {
      for (size_t v : *values) fits = fits && v % unit == 0 && v / unit <= maxCount_;
    }
    if (fits) return unit;
  }
  return 0;
}

MPI_Datatype MpiCommunicator::unitType(size_t unit) {
  // Committed types are cached for the communicator's life: creating one per call would cost a type
  // commit each time.
  if (unit == 1) return MPI_BYTE;
  for (const auto& entry : unitTypes_) {
    if (entry.first == unit) return entry.second;
  }
  MPI_Datatype type = MPI_DATATYPE_NULL;
  check(MPI_Type_contiguous(static_cast<int>(unit), MPI_BYTE, &type), "setup",
        "MPI_Type_contiguous");
  check(MPI_Type_commit(&type), "setup", "MPI_Type_commit");
  unitTypes_.emplace_back(unit, type);
  return type;
}

void MpiCommunicator::exchange(const char* op, const std::vector<Transfer>& transfers) {
  std::vector<MPI_Request> requests;
  // Per request: the peer a receive expects `bytes` from (-1: a send).
  struct Expected {
    int from;
    int bytes;
  };
  std::vector<Expected> expected;
  auto waitAll = [&] {
    if (requests.empty()) return MPI_SUCCESS;
    return MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
  };
  // The cancelled requests of a failed post complete at once: MPI_Waitall is bounded there.
  try {
    // Every chunk of one transfer uses the same tag; MPI's non-overtaking rule matches them to the
    // receives in the order both were posted.
    // Receives first, so that eager sends find them posted.
    for (bool sending : {false, true}) {
      for (const Transfer& t : transfers) {
        if (t.send != sending) continue;
        for (size_t off = 0; off < t.bytes; off += maxCount_) {
          int n = static_cast<int>(std::min(maxCount_, t.bytes - off));
          MPI_Request request = MPI_REQUEST_NULL;
          if (sending) {
            check(MPI_Isend(bytesOf(t.data) + off, n, MPI_BYTE, t.peer, kExchangeTag, comm_,
                            &request),
                  op, "MPI_Isend");
          } else {
            check(MPI_Irecv(bytesOf(t.data) + off, n, MPI_BYTE, t.peer, kExchangeTag, comm_,
                            &request),
                  op, "MPI_Irecv");
          }
          requests.push_back(request);
          expected.push_back({sending ? -1 : t.peer, n});
        }
      }
    }
  } catch (...) {
    for (auto& r : requests) {
      if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
    }
    waitAll();
    throw;
  }
  if (requests.empty()) return;
  std::vector<MPI_Status> statuses(requests.size());
  await(requests.data(), static_cast<int>(requests.size()), op, "MPI_Isend/MPI_Irecv",
        statuses.data());
  // A shorter message completes a receive without error in MPI; only the count shows it.
  for (size_t i = 0; i < expected.size(); ++i) {
    if (expected[i].from < 0) continue;
    int got = 0;
    MPI_Get_count(&statuses[i], MPI_BYTE, &got);
    if (got != expected[i].bytes) {
      throw IoError(prefix(op) + "rank " + std::to_string(expected[i].from) + " sent a piece of " +
                    std::to_string(got) + " bytes where " + std::to_string(expected[i].bytes) +
                    " were expected: the ranks disagree on the sizes exchanged");
    }
  }
}

std::string MpiCommunicator::timeoutMessage(const char* op, const char* call) const {
  return prefix(op) + call + " did not complete within HORA_TIMEOUT_SECONDS (" +
         std::to_string(timeout_.count() / 1000) +
         " s): a peer is stuck, stopped or unreachable. MPI cannot cancel a collective, so the MPI "
         "job is aborted.";
}

void MpiCommunicator::await(MPI_Request* requests, int count, const char* op, const char* call,
                            MPI_Status* statuses) {
  int rc = awaitOrAbort(requests, count, statuses, timeout_, comm_,
                        [&] { return timeoutMessage(op, call); });
  check(rc, op, call);
}

template <typename Call>
void MpiCommunicator::blocking(const char* op, const char* call, Call&& body) {
  check(watchdog_.guard(op, call, std::forward<Call>(body)), op, call);
}

void MpiCommunicator::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  checkElementwise("allreduce", op);
  if (size_ == 1 || count == 0) return;
  MpiReduction red = mpiReduction(context_, dtype, op);
  const size_t elem = dtypeSize(dtype);
  run("allreduce", [&] {
    // Chunks of at most maxCount_ elements keep every count an int; all ranks chunk alike, so the
    // calls pair up.
    for (size_t off = 0; off < count; off += maxCount_) {
      int n = static_cast<int>(std::min(maxCount_, count - off));
      // The blocking form under the watchdog, not MPI_Iallreduce: it is much faster on Open MPI
      // (mpi_wait.h).
      blocking("allreduce", "MPI_Allreduce", [&] {
        return MPI_Allreduce(MPI_IN_PLACE, bytesOf(buf) + off * elem, n, red.type, red.op, comm_);
      });
    }
  });
}

void MpiCommunicator::allgatherv(const void* in, void* out,
                                 const std::vector<size_t>& bytesPerRank) {
  checkPerRank("allgatherv", bytesPerRank.size());
  std::vector<size_t> offsets = collectives::startsOf(bytesPerRank);
  uint8_t* mine = bytesOf(out) + offsets[rank_];
  const size_t myBytes = bytesPerRank[rank_];
  // MPI forbids a send buffer that aliases the receive buffer; an input that already is this rank's
  // slot must go as MPI_IN_PLACE.
  const bool inPlace = in == mine;
  if (size_ == 1) {
    if (!inPlace && myBytes > 0) std::memmove(mine, in, myBytes);
    return;
  }
  run("allgatherv", [&] {
    size_t unit = unitFor(bytesPerRank, offsets);
    if (unit > 0) {
      // One collective when the sizes fit MPI's int counts in some unit; otherwise the fallback
      // below exchanges point to point, which has no such limit per call.
      MPI_Datatype type = unitType(unit);
      std::vector<int> counts = inUnits(bytesPerRank, unit), displs = inUnits(offsets, unit);
      blocking("allgatherv", "MPI_Allgatherv", [&] {
        return MPI_Allgatherv(inPlace ? MPI_IN_PLACE : in, counts[rank_], type, out, counts.data(),
                              displs.data(), type, comm_);
      });
      return;
    }
    // memmove, because the caller's input may overlap its own slot in the output.
    if (!inPlace && myBytes > 0) std::memmove(mine, in, myBytes);
    std::vector<Transfer> transfers;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      transfers.push_back({p, true, mine, myBytes});
      transfers.push_back({p, false, bytesOf(out) + offsets[p], bytesPerRank[p]});
    }
    exchange("allgatherv", transfers);
  });
}

void MpiCommunicator::broadcast(void* buf, size_t bytes, int root) {
  checkPeer("broadcast", root);
  if (size_ == 1 || bytes == 0) return;
  // Every rank splits the buffer the same way, so the root's n-th MPI_Bcast meets every other
  // rank's n-th.
  run("broadcast", [&] {
    for (size_t off = 0; off < bytes; off += maxCount_) {
      int n = static_cast<int>(std::min(maxCount_, bytes - off));
      blocking("broadcast", "MPI_Bcast",
               [&] { return MPI_Bcast(bytesOf(buf) + off, n, MPI_BYTE, root, comm_); });
    }
  });
}

void MpiCommunicator::alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                                const std::vector<size_t>& recvBytes) {
  checkPerRank("alltoallv", sendBytes.size());
  checkPerRank("alltoallv", recvBytes.size());
  // This rank's block to itself is a local copy, so both sides of it must have the same size.
  if (sendBytes[rank_] != recvBytes[rank_]) {
    throw InvalidArgument(prefix("alltoallv") + "this rank sends itself " +
                          std::to_string(sendBytes[rank_]) + " bytes but expects " +
                          std::to_string(recvBytes[rank_]));
  }
  std::vector<size_t> sendOffsets = collectives::startsOf(sendBytes),
                      recvOffsets = collectives::startsOf(recvBytes);
  const uint8_t* myIn = bytesOf(in) + sendOffsets[rank_];
  uint8_t* myOut = bytesOf(out) + recvOffsets[rank_];
  if (size_ == 1) {
    if (sendBytes[0] > 0 && myIn != myOut) std::memmove(myOut, myIn, sendBytes[0]);
    return;
  }
  run("alltoallv", [&] {
    std::vector<size_t> all = sendBytes;
    all.insert(all.end(), recvBytes.begin(), recvBytes.end());
    std::vector<size_t> allOffsets = sendOffsets;
    allOffsets.insert(allOffsets.end(), recvOffsets.begin(), recvOffsets.end());
    // One unit must serve both sides: MPI_Alltoallv is called with the same type for sending and
    // receiving.
    size_t unit = unitFor(all, allOffsets);
    if (unit > 0) {
      MPI_Datatype type = unitType(unit);
      std::vector<int> sc = inUnits(sendBytes, unit), sd = inUnits(sendOffsets, unit);
      std::vector<int> rc = inUnits(recvBytes, unit), rd = inUnits(recvOffsets, unit);
      blocking("alltoallv", "MPI_Alltoallv", [&] {
        return MPI_Alltoallv(in, sc.data(), sd.data(), type, out, rc.data(), rd.data(), type,
                             comm_);
      });
      return;
    }
    // The fallback exchange skips this rank, so its own block is copied here.
    if (sendBytes[rank_] > 0) std::memmove(myOut, myIn, sendBytes[rank_]);
    std::vector<Transfer> transfers;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      transfers.push_back(
          {p, true, const_cast<uint8_t*>(bytesOf(in)) + sendOffsets[p], sendBytes[p]});
      transfers.push_back({p, false, bytesOf(out) + recvOffsets[p], recvBytes[p]});
    }
    exchange("alltoallv", transfers);
  });
}

void MpiCommunicator::reduceScatter(const void* in, void* out,
                                    const std::vector<size_t>& countsPerRank, DataType dtype,
                                    ReduceOp op) {
  checkPerRank("reducescatter", countsPerRank.size());
  checkElementwise("reducescatter", op);
  const size_t elem = dtypeSize(dtype);
  std::vector<size_t> offsets = collectives::startsOf(countsPerRank);
  const size_t total = offsets.back() + countsPerRank.back();
  const size_t mine = countsPerRank[rank_];
  if (size_ == 1) {
    if (mine > 0 && in != out) std::memmove(out, in, mine * elem);
    return;
  }
  MpiReduction red = mpiReduction(context_, dtype, op);
  run("reducescatter", [&] {
    // MPI forbids the output overlapping the input; such a caller gets a private copy.
    std::vector<uint8_t> copy;
    if (overlaps(in, total * elem, out, mine * elem)) {
      copy.assign(bytesOf(in), bytesOf(in) + total * elem);
      in = copy.data();
    }
    if (total <= maxCount_) {
      std::vector<int> counts = inUnits(countsPerRank, 1);
      blocking("reducescatter", "MPI_Reduce_scatter",
               [&] { return MPI_Reduce_scatter(in, out, counts.data(), red.type, red.op, comm_); });
      return;
    }
    // Too many elements for one call: reduce each rank's block to it, in chunks.
    for (int k = 0; k < size_; ++k) {
      for (size_t off = 0; off < countsPerRank[k]; off += maxCount_) {
        int n = static_cast<int>(std::min(maxCount_, countsPerRank[k] - off));
        const uint8_t* src = bytesOf(in) + (offsets[k] + off) * elem;
        // Only the root's receive buffer is significant in MPI_Reduce.
        void* dst = k == rank_ ? bytesOf(out) + off * elem : nullptr;
        blocking("reducescatter", "MPI_Reduce",
                 [&] { return MPI_Reduce(src, dst, n, red.type, red.op, k, comm_); });
      }
    }
  });
}

void MpiCommunicator::barrier() {
  if (size_ == 1) return;
  run("barrier", [&] { blocking("barrier", "MPI_Barrier", [&] { return MPI_Barrier(comm_); }); });
}

void MpiCommunicator::sendRecv(int sendTo, const void* sendBuf, size_t sendBytes, int recvFrom,
                               void* recvBuf, size_t recvBytes) {
  if (sendBytes > 0) checkPeer("sendrecv", sendTo);
  if (recvBytes > 0) checkPeer("sendrecv", recvFrom);
  bool selfSend = sendBytes > 0 && sendTo == rank_;
  bool selfRecv = recvBytes > 0 && recvFrom == rank_;
  if (selfSend || selfRecv) {
    if (selfSend != selfRecv || sendBytes != recvBytes) {
      throw InvalidArgument(
          prefix("sendrecv") +
          "a rank can exchange with itself only by sending and receiving the same number of bytes");
    }
    if (recvBuf != sendBuf) std::memmove(recvBuf, sendBuf, sendBytes);
    return;
  }
  if (sendBytes == 0 && recvBytes == 0) return;
  run("sendrecv", [&] {
    if (sendBytes <= maxCount_ && recvBytes <= maxCount_) {
      MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
      MPI_Status statuses[2];
      // MPI_PROC_NULL turns a missing direction into a request that completes at once, so one wait
      // covers both directions.
      check(MPI_Irecv(recvBuf, static_cast<int>(recvBytes), MPI_BYTE,
                      recvBytes > 0 ? recvFrom : MPI_PROC_NULL, kSendRecvTag, comm_, &requests[0]),
            "sendrecv", "MPI_Irecv");
      int rc = MPI_Isend(sendBuf, static_cast<int>(sendBytes), MPI_BYTE,
                         sendBytes > 0 ? sendTo : MPI_PROC_NULL, kSendRecvTag, comm_, &requests[1]);
      if (rc != MPI_SUCCESS) {
        // The posted receive must not outlive this call: it would write into the caller's buffer
        // later. A cancelled receive completes at once, so this wait is bounded.
        MPI_Cancel(&requests[0]);
        MPI_Wait(&requests[0], MPI_STATUS_IGNORE);
        check(rc, "sendrecv", "MPI_Isend");
      }
      await(requests, 2, "sendrecv", "MPI_Isend/MPI_Irecv", statuses);
      int got = 0;
      // A shorter message completes the receive without error in MPI; only the count shows it.
      MPI_Get_count(&statuses[0], MPI_BYTE, &got);
      if (recvBytes > 0 && static_cast<size_t>(got) != recvBytes) {
        throw IoError(prefix("sendrecv") + "rank " + std::to_string(recvFrom) + " sent " +
                      std::to_string(got) + " bytes, expected " + std::to_string(recvBytes));
      }
      return;
    }
    std::vector<Transfer> transfers;
    if (sendBytes > 0) transfers.push_back({sendTo, true, const_cast<void*>(sendBuf), sendBytes});
    if (recvBytes > 0) transfers.push_back({recvFrom, false, recvBuf, recvBytes});
    exchange("sendrecv", transfers);
  });
}

std::unique_ptr<Communicator> MpiCommunicator::subset(const std::vector<int>& ranks) {
  int mine = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    checkPeer("subset", ranks[i]);
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      throw InvalidArgument(prefix("subset") + "ranks must be ascending and distinct");
    }
    if (ranks[i] == rank_) mine = static_cast<int>(i);
  }
  if (mine < 0) throw InvalidArgument(prefix("subset") + "this rank is not a member of the subset");
  MPI_Comm sub = MPI_COMM_NULL;
  run("subset", [&] {
    MPI_Group all = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
    check(MPI_Comm_group(comm_, &all), "subset", "MPI_Comm_group");
    int rc = MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &group);
    MPI_Group_free(&all);
    check(rc, "subset", "MPI_Group_incl");
    {
      // No non-blocking form: every member agreed to the subset before this call, but one that
      // dies or stops before making it would hold the others for ever.
      ExitWatchdog watchdog(timeout_, prefix("subset") + "MPI_Comm_create_group over ranks [" +
                                          rankList(ranks) +
                                          "] did not return within HORA_TIMEOUT_SECONDS (" +
                                          std::to_string(timeout_.count() / 1000) +
                                          " s): a member is stuck, stopped or dead, so this "
                                          "process exits");
      rc = MPI_Comm_create_group(comm_, group, groupTag(ranks), &sub);
    }
    MPI_Group_free(&group);
    check(rc, "subset", "MPI_Comm_create_group");
  });
  // The new communicator takes `sub` over, and with it the duty to retire it.
  return std::make_unique<MpiCommunicator>(sub, worldRank_, maxCount_, timeout_);
}

}  // namespace mpi
}  // namespace hora
