#pragma once
// TcpCommunicator: the Communicator of the built-in TCP transport, for the world or for a subset
// of it. Views made by subset() share the world's sockets (TcpPeerSockets) and differ only in the
// mapping of their ranks to world ranks.
//
// Each call validates its arguments (InvalidArgument, nothing sent) and runs the transport-neutral
// collective (core/collectives/, which picks the algorithm) over TcpLinks. A failure inside a
// collective (IoError, TimeoutError) leaves the byte streams misaligned, so it shuts the shared
// mesh down: every later call on this communicator or any view of it throws IoError quoting the
// first failure, and peers blocked on this rank fail fast. Used by one thread at a time, as
// Communicator requires.
#include <memory>
#include <string>
#include <vector>

#include "core/transport/communicator.h"
#include "core/transport/tcp/links.h"

namespace hora {
namespace tcp {

class TcpCommunicator : public Communicator {
 public:
  // worldRanks[i] is the world rank of member i; rank is this process's index in worldRanks.
  TcpCommunicator(std::shared_ptr<TcpPeerSockets> peers, std::vector<int> worldRanks, int rank);

  int rank() const override { return links_.rank(); }
  int size() const override { return links_.size(); }
  std::string backendName() const override { return "tcp"; }
  // Host memory, every operation over Links, the element-wise reductions, every dtype, subsets.
  Capabilities capabilities() const override { return Capabilities::cpuComplete(); }

  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) override;
  void broadcast(void* buf, size_t bytes, int root) override;
  void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                 const std::vector<size_t>& recvBytes) override;
  void reduceScatter(const void* in, void* out, const std::vector<size_t>& countsPerRank,
                     DataType dtype, ReduceOp op) override;
  void barrier() override;
  void sendRecv(int sendTo, const void* sendBuf, size_t sendBytes, int recvFrom, void* recvBuf,
                size_t recvBytes) override;
  std::unique_ptr<Communicator> subset(const std::vector<int>& ranks) override;

 private:
  // Runs one collective: refuses work on a failed mesh, labels errors with the op name, and
  // shuts the mesh down when the collective fails part-way.
  template <typename Body>
  void run(const char* op, Body&& body);
  void checkPerRank(const char* op, size_t got) const;
  void checkPeer(const char* op, int peer) const;
  std::string prefix(const char* op) const;

  std::shared_ptr<TcpPeerSockets> peers_;
  TcpLinks links_;
};

}  // namespace tcp
}  // namespace hora
