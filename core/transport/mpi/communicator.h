#pragma once
// MpiCommunicator: the Communicator of the MPI transport, for the world or a process set. Each
// instance owns a private MPI communicator (a duplicate made by MpiTransport, or one made by
// subset() with MPI_Comm_create_group), so Hora's messages never match the application's own
// MPI traffic, and hands it to MpiContext::retire() on destruction.
//
// Collectives map onto MPI's native ones (MPI_Allreduce, MPI_Allgatherv, MPI_Bcast,
// MPI_Alltoallv, MPI_Reduce_scatter, MPI_Barrier, MPI_Sendrecv); the dtype and op mapping is in
// mpi_datatypes.h. MPI counts are int: element counts beyond maxCount are split into several
// calls (allreduce, broadcast) or moved in a larger unit (byte-counted allgatherv/alltoallv use
// a contiguous type of the largest power of two dividing every count and offset); what still
// does not fit falls back to chunked non-blocking point-to-point transfers. maxCount is INT_MAX
// except in tests, which lower it to exercise those paths with small buffers.
//
// Errors: the communicator uses MPI_ERRORS_RETURN, so an MPI failure is thrown as IoError
// naming the rank and the op, and the communicator refuses work afterwards.
//
// Timeouts: a collective runs MPI's blocking call (Open MPI's tuned collectives, up to 3x faster
// than its non-blocking ones on one host) under a CallWatchdog; point-to-point transfers are
// posted non-blocking and polled. One that has not completed after `timeout`
// (HORA_TIMEOUT_SECONDS; 0 = never) means a peer is stuck, stopped or unreachable; MPI cannot
// cancel a collective, so the rank logs which call timed out and aborts the MPI job (exit code
// 124), which ends every process of the job. subset()'s MPI_Comm_create_group runs only after
// every member agreed to it, under an ExitWatchdog.
// Used by one thread at a time, as Communicator requires.
#include <climits>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/common/time.h"
#include "core/transport/communicator.h"
#include "core/transport/mpi/mpi_context.h"
#include "core/transport/mpi/mpi_wait.h"

namespace hora {
namespace mpi {

class MpiCommunicator : public Communicator {
 public:
  // Takes ownership of comm. worldRank labels error messages.
  MpiCommunicator(MPI_Comm comm, int worldRank, size_t maxCount = INT_MAX,
                  Millis timeout = Millis(0));
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "mpi"; }
  // Host memory, every operation natively, the element-wise reductions (user-defined MPI ops for
  // float16 and bfloat16, mpi_datatypes.h), every dtype, subsets.
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

  MPI_Comm comm() const { return comm_; }

 private:
  struct Transfer {
    int peer;
    bool send;
    void* data;
    size_t bytes;
  };

  template <typename Body>
  void run(const char* op, Body&& body);
  void check(int rc, const char* op, const char* call) const;
  std::string prefix(const char* op) const;
  void checkPerRank(const char* op, size_t got) const;
  void checkPeer(const char* op, int peer) const;
  void checkElementwise(const char* op, ReduceOp reduceOp) const;

  // The unit (a power of two, 1 = bytes) in which every count and offset fits an MPI int;
  // 0 when none does.
  size_t unitFor(const std::vector<size_t>& counts, const std::vector<size_t>& offsets) const;
  // A committed contiguous type of `unit` bytes (MPI_BYTE for 1), cached.
  MPI_Datatype unitType(size_t unit);
  // Posts every transfer in chunks of at most maxCount bytes and waits for all of them.
  void exchange(const char* op, const std::vector<Transfer>& transfers);
  // Polls the requests until all completed; past timeout_, aborts the MPI job.
  void await(MPI_Request* requests, int count, const char* op, const char* call,
             MPI_Status* statuses = nullptr);
  // Runs a blocking MPI call (body returns its error code) under watchdog_.
  template <typename Call>
  void blocking(const char* op, const char* call, Call&& body);
  std::string timeoutMessage(const char* op, const char* call) const;

  MpiContext& context_;
  MpiContext::Lease lease_;
  MPI_Comm comm_;
  int worldRank_;
  size_t maxCount_;
  Millis timeout_;
  CallWatchdog watchdog_;
  int rank_ = 0;
  int size_ = 1;
  std::string failure_;  // set when a collective failed: the communicator refuses further work
  std::vector<std::pair<size_t, MPI_Datatype>> unitTypes_;
};

}  // namespace mpi
}  // namespace hora
