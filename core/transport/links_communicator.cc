#include "core/transport/links_communicator.h"

#include <cstring>

#include "core/collectives/algorithms.h"
#include "core/collectives/dispatch.h"
#include "core/common/errors.h"

namespace hora {

std::string LinksCommunicator::prefix(const char* op) const {
  return "rank " + std::to_string(worldRank()) + ": " + backendName() + " " + op + ": ";
}

bool LinksCommunicator::allreduceDirect(void*, size_t, DataType, ReduceOp) { return false; }
bool LinksCommunicator::broadcastDirect(void*, size_t, int) { return false; }

void LinksCommunicator::checkPerRank(const char* op, size_t got) const {
  if (got != static_cast<size_t>(size())) {
    throw InvalidArgument(prefix(op) + "expected one entry per rank (" + std::to_string(size()) +
                          "), got " + std::to_string(got));
  }
}

void LinksCommunicator::checkPeer(const char* op, int peer) const {
  if (peer < 0 || peer >= size()) {
    throw InvalidArgument(prefix(op) + "rank " + std::to_string(peer) +
                          " is outside the communicator (size " + std::to_string(size()) + ")");
  }
}

int LinksCommunicator::checkSubset(const std::vector<int>& ranks) const {
  int mine = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    checkPeer("subset", ranks[i]);
    // Ascending, distinct ranks give the subset the same relative order as this communicator.
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      throw InvalidArgument(prefix("subset") + "ranks must be ascending and distinct");
    }
    if (ranks[i] == rank()) mine = static_cast<int>(i);
  }
  if (mine < 0) throw InvalidArgument(prefix("subset") + "this rank is not a member of the subset");
  return mine;
}

void LinksCommunicator::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (!capabilities().reduces(op)) {
    throw InvalidArgument(
        prefix("allreduce") + "reduce op " + reduceOpName(op) +
        " is not element-wise (Average is Sum then scaling; Adasum has its own op)");
  }
  // The op is checked before this shortcut, so an unsupported op fails at every job size, not only
  // on several ranks.
  if (size() == 1 || count == 0) return;
  run("allreduce", [&] {
    if (!allreduceDirect(buf, count, dtype, op)) {
      collectives::allreduce(links(), buf, count, dtype, op);
    }
  });
}

void LinksCommunicator::allgatherv(const void* in, void* out,
                                   const std::vector<size_t>& bytesPerRank) {
  checkPerRank("allgatherv", bytesPerRank.size());
  run("allgatherv", [&] { collectives::allgatherv(links(), in, out, bytesPerRank); });
}

void LinksCommunicator::broadcast(void* buf, size_t bytes, int root) {
  checkPeer("broadcast", root);
  if (size() == 1 || bytes == 0) return;
  run("broadcast", [&] {
    if (!broadcastDirect(buf, bytes, root)) collectives::broadcast(links(), buf, bytes, root);
  });
}

void LinksCommunicator::alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                                  const std::vector<size_t>& recvBytes) {
  checkPerRank("alltoallv", sendBytes.size());
  checkPerRank("alltoallv", recvBytes.size());
  int r = rank();
  // This rank's block to itself never crosses a link, so what it sends and what it expects must be
  // the same size.
  if (sendBytes[r] != recvBytes[r]) {
    throw InvalidArgument(prefix("alltoallv") + "this rank sends itself " +
                          std::to_string(sendBytes[r]) + " bytes but expects " +
                          std::to_string(recvBytes[r]));
  }
  run("alltoallv",
      [&] { collectives::alltoallv(links(), in, sendBytes, out, recvBytes, everyPairLinked()); });
}

void LinksCommunicator::reduceScatter(const void* in, void* out,
                                      const std::vector<size_t>& countsPerRank, DataType dtype,
                                      ReduceOp op) {
  checkPerRank("reducescatter", countsPerRank.size());
  if (!capabilities().reduces(op)) {
    throw InvalidArgument(prefix("reducescatter") + "reduce op " + reduceOpName(op) +
                          " is not element-wise");
  }
  run("reducescatter",
      [&] { collectives::reduceScatterRing(links(), in, out, countsPerRank, dtype, op); });
}

void LinksCommunicator::barrier() {
  if (size() == 1) return;
  run("barrier", [&] { collectives::barrierDissemination(links()); });
}

void LinksCommunicator::sendRecv(int sendTo, const void* sendBuf, size_t sendBytes, int recvFrom,
                                 void* recvBuf, size_t recvBytes) {
  if (sendBytes > 0) checkPeer("sendrecv", sendTo);
  if (recvBytes > 0) checkPeer("sendrecv", recvFrom);
  bool selfSend = sendBytes > 0 && sendTo == rank();
  bool selfRecv = recvBytes > 0 && recvFrom == rank();
  // Links have no channel from a rank to itself, so an exchange with itself is a local copy.
  if (selfSend || selfRecv) {
    if (selfSend != selfRecv || sendBytes != recvBytes) {
      throw InvalidArgument(
          prefix("sendrecv") +
          "a rank can exchange with itself only by sending and receiving the same number "
          "of bytes");
    }
    if (recvBuf != sendBuf) std::memmove(recvBuf, sendBuf, sendBytes);
    return;
  }
  run("sendrecv", [&] {
    collectives::Transfer t[2] = {{sendTo, true, const_cast<void*>(sendBuf), sendBytes},
                                  {recvFrom, false, recvBuf, recvBytes}};
    collectives::runTransfers(links(), t, 2);
  });
}

}  // namespace hora
