#pragma once
// LinksCommunicator: the Communicator of every transport whose collectives are the
// transport-neutral algorithms of core/collectives/ over collectives::Links (TCP sockets,
// shared-memory rings). It validates each call's arguments (InvalidArgument, nothing moved), runs
// the collective (the algorithm table picks the algorithm), labels errors with the op, and on a
// failure part-way calls the transport's markFailed(): the byte streams are misaligned from then
// on, so every later call on this communicator or any view of it throws IoError quoting the first
// failure.
//
// A transport provides links(), failure(), markFailed() and subset(); it may run some allreduces
// and broadcasts its own way (allreduceDirect(), broadcastDirect()). Used by one thread at a
// time, as Communicator requires.
#include <exception>
#include <string>
#include <vector>

#include "core/collectives/links.h"
#include "core/common/errors.h"
#include "core/transport/communicator.h"

namespace hora {

class LinksCommunicator : public Communicator {
 public:
  int rank() const override { return linksRef().rank(); }
  int size() const override { return linksRef().size(); }
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

 protected:
  virtual collectives::Links& links() = 0;
  const collectives::Links& linksRef() const {
    return const_cast<LinksCommunicator*>(this)->links();
  }
  // This process's rank in the job, for error messages.
  virtual int worldRank() const = 0;
  // Why the shared connections became unusable, "" while healthy.
  virtual std::string failure() const = 0;
  virtual void markFailed(const std::string& why) = 0;
  // The collective about to run, for the transport's error messages.
  virtual void setOp(const char* op) = 0;
  // An allreduce the transport runs without Links (called inside run(), arguments checked);
  // false leaves it to the algorithm table.
  virtual bool allreduceDirect(void* buf, size_t count, DataType dtype, ReduceOp op);
  // Likewise for broadcast (arguments checked, size() > 1, bytes > 0).
  virtual bool broadcastDirect(void* buf, size_t bytes, int root);
  // Every pair of members is linked from the start (no link to open on first use): the algorithm
  // table then never trades bytes for fewer links.
  virtual bool everyPairLinked() const { return false; }

  // Validates a subset's ranks (ascending, distinct, members, this rank among them) and returns
  // this rank's index in it.
  int checkSubset(const std::vector<int>& ranks) const;
  std::string prefix(const char* op) const;
  // Runs a collective's body: refuses after an earlier failure, and marks this one's.
  template <typename Body>
  void run(const char* op, Body&& body);

 private:
  void checkPerRank(const char* op, size_t got) const;
  void checkPeer(const char* op, int peer) const;
};

template <typename Body>
void LinksCommunicator::run(const char* op, Body&& body) {
  std::string failed = failure();
  if (!failed.empty()) {
    throw IoError(prefix(op) + "the connections failed earlier and cannot be used (" + failed +
                  ")");
  }
  setOp(op);
  try {
    body();
  } catch (const std::exception& e) {
    markFailed(e.what());
    throw;
  }
}

}  // namespace hora
