#pragma once
// Communicator: a connected group of ranks (the world or a process set) that runs data
// collectives on raw host buffers.
//
// Contract:
// - Used by one thread at a time (the runtime's background thread). Every member must call the
//   same collectives in the same order with compatible arguments; the coordinator guarantees it.
// - Calls block until done. A peer that closes its connection, sends a malformed frame, or stays
//   silent longer than the op timeout makes the call throw IoError / TimeoutError naming the peer;
//   the communicator is unusable afterwards.
// - Reductions take ReduceOp Sum, Min, Max or Product (Average is Sum plus scaling, done by the
//   caller). Buffers are never retained after a call returns.
// - A backend that lacks an operation inherits the default body, which throws NotSupported with
//   "backend X does not support Y", and leaves it out of capabilities().
// - capabilities() says what the backend runs natively (devices, ops, reductions, dtypes,
//   subsets); callers check requests against it before they reach the backend. The default is
//   Capabilities::cpuComplete().
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/common/dtype.h"
#include "core/transport/capabilities.h"
#include "core/transport/shared_pool.h"

namespace hora {

// One tensor of a fused allreduce: `bytes` at `data`, or, with data null, as many zero bytes
// whose result is dropped (a joined rank's stand-in).
struct BufferPiece {
  void* data;
  size_t bytes;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backendName() const = 0;
  virtual Capabilities capabilities() const;
  // True when allreduce (allgatherv) runs the hierarchical algorithm (hierarchical_communicator.h);
  // the timeline names the activity after it.
  virtual bool hierarchicalAllreduce() const { return false; }
  virtual bool hierarchicalAllgather() const { return false; }

  // buf holds count elements on every rank; on return it holds the reduction over all ranks.
  virtual void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op);
  // Whether allreducePieces() takes an allreduce of `count` elements: the backend then reduces
  // tensors that were not fused into one buffer first, with fewer copies than fusing them would
  // cost. False by default.
  virtual bool reducesPieces(size_t count, DataType dtype, ReduceOp op) const;
  // The allreduce of the concatenation of `pieces` (count elements in all, on every rank the same
  // sizes), each piece's part of the result written back into it, exactly as allreduce() on the
  // fused buffer would. Only where reducesPieces() said so.
  virtual void allreducePieces(const std::vector<BufferPiece>& pieces, size_t count, DataType dtype,
                               ReduceOp op);
  // in holds bytesPerRank[rank()] bytes; out receives the concatenation of every rank's block
  // (sum of bytesPerRank), in rank order. in may alias out's block for this rank.
  virtual void allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank);
  // root's bytes are copied into buf on every rank. root is a rank of this communicator.
  virtual void broadcast(void* buf, size_t bytes, int root);
  // Block i of in (sendBytes[i] bytes, blocks contiguous in rank order) goes to rank i; block j of
  // out (recvBytes[j] bytes) comes from rank j.
  virtual void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                         const std::vector<size_t>& recvBytes);
  // in holds sum(countsPerRank) elements on every rank; out receives this rank's block
  // (countsPerRank[rank()] elements, at offset sum(countsPerRank[0..rank()))) of the reduction.
  virtual void reduceScatter(const void* in, void* out, const std::vector<size_t>& countsPerRank,
                             DataType dtype, ReduceOp op);
  virtual void barrier();
  // Point-to-point exchange used by algorithms the engine builds itself (Adasum). Either side may
  // be empty (bytes == 0) to only send or only receive; peers are ranks of this communicator.
  virtual void sendRecv(int sendTo, const void* sendBuf, size_t sendBytes, int recvFrom,
                        void* recvBuf, size_t recvBytes);

  // A communicator over a subset of this one's ranks (given in this communicator's numbering,
  // ascending), sharing its connections. Called by members only. Collectives on the subset and on
  // this communicator must not overlap in time (the single background thread guarantees it).
  virtual std::unique_ptr<Communicator> subset(const std::vector<int>& ranks) = 0;

  // Memory of this rank that the other members read in place when a collective's input lies
  // there (shared_pool.h), or null when the backend has none.
  virtual std::shared_ptr<SharedPool> sharedPool() const { return nullptr; }

 protected:
  [[noreturn]] void notSupported(const char* op) const;
};

}  // namespace hora
