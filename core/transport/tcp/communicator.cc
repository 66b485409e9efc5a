#include "core/transport/tcp/communicator.h"

#include <algorithm>
#include <cstring>

#include "core/collectives/algorithms.h"
#include "core/collectives/dispatch.h"
#include "core/common/errors.h"

namespace hora {
namespace tcp {

TcpCommunicator::TcpCommunicator(std::shared_ptr<TcpPeerSockets> peers, std::vector<int> worldRanks,
                                 int rank)
    : peers_(peers), links_(std::move(peers), std::move(worldRanks), rank) {}

std::string TcpCommunicator::prefix(const char* op) const {
  return "rank " + std::to_string(peers_->worldRank) + ": tcp " + op + ": ";
}

template <typename Body>
void TcpCommunicator::run(const char* op, Body&& body) {
  if (!peers_->failure.empty()) {
    throw IoError(prefix(op) + "the connections failed earlier and cannot be used (" +
                  peers_->failure + ")");
  }
  links_.setOp(op);
  try {
    body();
  } catch (const std::exception& e) {
    peers_->markFailed(e.what());
    throw;
  }
}

void TcpCommunicator::checkPerRank(const char* op, size_t got) const {
  if (got != static_cast<size_t>(size())) {
    throw InvalidArgument(prefix(op) + "expected one entry per rank (" + std::to_string(size()) +
                          "), got " + std::to_string(got));
  }
}

void TcpCommunicator::checkPeer(const char* op, int peer) const {
  if (peer < 0 || peer >= size()) {
    throw InvalidArgument(prefix(op) + "rank " + std::to_string(peer) +
                          " is outside the communicator (size " + std::to_string(size()) + ")");
  }
}

void TcpCommunicator::allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  if (!capabilities().reduces(op)) {
    throw InvalidArgument(
        prefix("allreduce") + "reduce op " + reduceOpName(op) +
        " is not element-wise (Average is Sum then scaling; Adasum has its own op)");
  }
  if (size() == 1 || count == 0) return;
  run("allreduce", [&] { collectives::allreduce(links_, buf, count, dtype, op); });
}

void TcpCommunicator::allgatherv(const void* in, void* out,
                                 const std::vector<size_t>& bytesPerRank) {
  checkPerRank("allgatherv", bytesPerRank.size());
  run("allgatherv", [&] { collectives::allgathervRing(links_, in, out, bytesPerRank); });
}

void TcpCommunicator::broadcast(void* buf, size_t bytes, int root) {
  checkPeer("broadcast", root);
  if (size() == 1 || bytes == 0) return;
  run("broadcast", [&] { collectives::broadcast(links_, buf, bytes, root); });
}

void TcpCommunicator::alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                                const std::vector<size_t>& recvBytes) {
  checkPerRank("alltoallv", sendBytes.size());
  checkPerRank("alltoallv", recvBytes.size());
  int r = rank();
  if (sendBytes[r] != recvBytes[r]) {
    throw InvalidArgument(prefix("alltoallv") + "this rank sends itself " +
                          std::to_string(sendBytes[r]) + " bytes but expects " +
                          std::to_string(recvBytes[r]));
  }
  run("alltoallv", [&] { collectives::alltoallvPairwise(links_, in, sendBytes, out, recvBytes); });
}

void TcpCommunicator::reduceScatter(const void* in, void* out,
                                    const std::vector<size_t>& countsPerRank, DataType dtype,
                                    ReduceOp op) {
  checkPerRank("reducescatter", countsPerRank.size());
  if (!capabilities().reduces(op)) {
    throw InvalidArgument(prefix("reducescatter") + "reduce op " + reduceOpName(op) +
                          " is not element-wise");
  }
  run("reducescatter",
      [&] { collectives::reduceScatterRing(links_, in, out, countsPerRank, dtype, op); });
}

void TcpCommunicator::barrier() {
  if (size() == 1) return;
  run("barrier", [&] { collectives::barrierDissemination(links_); });
}

void TcpCommunicator::sendRecv(int sendTo, const void* sendBuf, size_t sendBytes, int recvFrom,
                               void* recvBuf, size_t recvBytes) {
  if (sendBytes > 0) checkPeer("sendrecv", sendTo);
  if (recvBytes > 0) checkPeer("sendrecv", recvFrom);
  bool selfSend = sendBytes > 0 && sendTo == rank();
  bool selfRecv = recvBytes > 0 && recvFrom == rank();
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
    collectives::runTransfers(links_, t, 2);
  });
}

std::unique_ptr<Communicator> TcpCommunicator::subset(const std::vector<int>& ranks) {
  std::vector<int> world;
  int mine = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    checkPeer("subset", ranks[i]);
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      throw InvalidArgument(prefix("subset") + "ranks must be ascending and distinct");
    }
    if (ranks[i] == rank()) mine = static_cast<int>(i);
    world.push_back(links_.worldRank(ranks[i]));
  }
  if (mine < 0) throw InvalidArgument(prefix("subset") + "this rank is not a member of the subset");
  return std::make_unique<TcpCommunicator>(peers_, std::move(world), mine);
}

}  // namespace tcp
}  // namespace hora
