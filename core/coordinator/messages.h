#pragma once
// Negotiation messages. A Request says "this rank has tensor <name> ready for <op>"; the
// coordinator (world rank 0) collects them and answers with Responses that every member of the
// process set executes in the same order. Encoded with a small versioned binary codec (codec.cc);
// the format is internal to one build of Hora.
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/dtype.h"

namespace hora {

// Values match Horovod's request/response types; the process-set kinds are Hora's.
enum class OpKind : uint8_t {
  Allreduce = 0, Allgather = 1, Broadcast = 2, Join = 3, Adasum = 4, Alltoall = 5, Barrier = 6,
  Reducescatter = 7, Error = 8, AddProcessSet = 9, RemoveProcessSet = 10,
};
const char* opKindName(OpKind k);  // "ALLREDUCE", ...

struct Request {
  OpKind kind = OpKind::Allreduce;
  std::string name;
  int32_t processSetId = 0;
  int32_t rank = 0;                // world rank of the sender
  DataType dtype = DataType::Float32;
  std::vector<int64_t> shape;
  int32_t device = -1;
  ReduceOp reduceOp = ReduceOp::Sum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t rootRank = 0;            // world rank (broadcast)
  std::vector<int32_t> splits;     // alltoall: rows sent to each set rank; also add-process-set ranks
  std::string callSite;            // file:line of the frontend call, for the stall inspector

  // Parameters that must agree across ranks; name and rank excluded.
  bool sameParams(const Request& o) const;
};

// Why an Error response failed: decides the exception type raised on every rank.
enum class ResponseError : uint8_t { None = 0, Mismatch = 1, InvalidArgument = 2 };

struct Response {
  OpKind kind = OpKind::Allreduce;
  std::vector<std::string> names;  // more than one: fused, executed as one collective
  int32_t processSetId = 0;
  DataType dtype = DataType::Float32;
  int32_t device = -1;
  ReduceOp reduceOp = ReduceOp::Sum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t rootRank = 0;              // world rank (broadcast)
  // Per kind:
  // - allreduce, adasum, reducescatter: per tensor, its element count (joined ranks use it to
  //   contribute zeros; reducescatter: dim0 is sizes[i] / rowElements[i]).
  // - allgather: per tensor, dim0 of each set rank (names.size() x setSize, tensor-major).
  // - alltoall (never fused): the splits matrix, setSize x setSize, row = sending set rank.
  // - add-process-set: the new id, then the ranks. remove-process-set: the id.
  std::vector<int64_t> sizes;
  std::vector<int64_t> rowElements;  // per tensor: elements in one dim0 row (allgather, alltoall,
                                     // reducescatter)
  std::vector<int32_t> cacheSlots;   // per tensor: >= 0 when every rank caches it in that slot
  ResponseError errorCode = ResponseError::None;
  std::string errorMessage;          // kind == Error
  int32_t lastJoinedRank = -1;       // join
  bool withJoinedRanks = false;      // some ranks joined: they contribute zeros

  size_t tensorCount() const { return names.size(); }
};

}  // namespace hora
