#pragma once
// Negotiation messages. A Request says "this rank has tensor <name> ready for <op>"; the
// coordinator (world rank 0) collects them and answers with Responses that every member of the
// process set executes in the same order. Encoded with a small versioned binary codec
// (core/coordinator/codec.cc); the format is internal to one build of Hora.
//
// The vocabulary shared by every layer that names an operation: it sits below the coordinator,
// fusion, ops and the transports' request checks, and includes nothing but core/common.
//
// Besides the fields every message has (kind, name(s), process set, dtype, device, reduction,
// scale factors), each kind carries:
//
//   kind               Request (per rank)          Response (agreed, per tensor unless noted)
//   Allreduce, Adasum  shape                       elementCounts
//   Reducescatter      shape                       elementCounts, rowElements
//   Allgather          shape                       rowElements, gatheredRows
//   Alltoall           shape, splits               rowElements, splitsMatrix (one tensor)
//   Broadcast          shape, rootRank             rootRank
//   Barrier            -                           -
//   Join               -                           lastJoinedRank
//   AddProcessSet      processSet.ranks            processSet.id (new), processSet.ranks
//   RemoveProcessSet   processSet.id               processSet.id
//   Error              -                           errorCode, errorMessage
#include <cstdint>
#include <string>
#include <vector>

#include "core/common/dtype.h"
#include "core/common/tensor.h"

namespace hora {

// Values match Horovod's request/response types; the process-set kinds are Hora's.
enum class OpKind : uint8_t {
  Allreduce = 0,
  Allgather = 1,
  Broadcast = 2,
  Join = 3,
  Adasum = 4,
  Alltoall = 5,
  Barrier = 6,
  Reducescatter = 7,
  Error = 8,
  AddProcessSet = 9,
  RemoveProcessSet = 10,
};
constexpr uint8_t kMaxOpKind = 10;
const char* opKindName(OpKind k);  // "ALLREDUCE", ...

// Data ops move tensors through a collective; the others (join, barrier, process-set changes,
// errors) carry no tensor and are handled by the runtime itself.
bool isDataOp(OpKind k);

// Arguments of add/remove-process-set.
struct ProcessSetChange {
  int32_t id = -1;             // remove: the set to remove; add (response): the id assigned
  std::vector<int32_t> ranks;  // add: world ranks of the new set, ascending

  bool operator==(const ProcessSetChange& o) const { return id == o.id && ranks == o.ranks; }
};

struct Request {
  OpKind kind = OpKind::Allreduce;
  std::string name;
  int32_t processSetId = 0;
  int32_t rank = 0;                    // world rank of the sender (set at enqueue)
  DataType dtype = DataType::Float32;  // dtype, shape, device: of the tensor (set at enqueue)
  std::vector<int64_t> shape;
  int32_t device = -1;
  ReduceOp reduceOp = ReduceOp::Sum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t rootRank = 0;         // broadcast: world rank of the root
  std::vector<int32_t> splits;  // alltoall: rows sent to each set rank (empty = equal split)
  ProcessSetChange processSet;  // add/remove-process-set
  std::string callSite;         // file:line of the frontend call, for the stall inspector

  // Parameters that must agree across ranks; name and rank excluded.
  bool sameParams(const Request& o) const;
};

// What a frontend asks for, one tensor: the Request that is negotiated, plus this rank's tensor.
// The frontend fills the request's kind, name, set and op arguments; enqueue checks them and
// fills rank, dtype, shape and device from `tensor`. The request then travels unchanged.
struct OpRequest {
  Request request;
  TensorView tensor;  // input; for allreduce/broadcast/adasum also the output (in place)
};

// Why an Error response failed: decides the exception type raised on every rank.
enum class ResponseError : uint8_t { None = 0, Mismatch = 1, InvalidArgument = 2 };
constexpr uint8_t kMaxResponseError = 2;

struct Response {
  OpKind kind = OpKind::Allreduce;
  std::vector<std::string> names;  // more than one: fused, executed as one collective
  int32_t processSetId = 0;
  DataType dtype = DataType::Float32;
  int32_t device = -1;
  ReduceOp reduceOp = ReduceOp::Sum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t rootRank = 0;  // broadcast: world rank of the root

  // Per tensor, in the order of names:
  std::vector<int64_t> elementCounts;  // allreduce, adasum, reducescatter: elements (a joined
                                       // rank contributes this many zeros)
  std::vector<int64_t> rowElements;    // allgather, alltoall, reducescatter: elements in one
                                       // dim0 row
  std::vector<int64_t> gatheredRows;   // allgather: dim0 of each set rank, names.size() x
                                       // setSize, tensor-major
  std::vector<int32_t> cacheSlots;     // >= 0 when every rank caches the tensor in that slot
  // Every tensor's cached response holds as it is (every rank reported a cache hit): the wire then
  // carries only cacheSlots, and each rank rebuilds the rest from its own cache (slotsOnly()).
  bool cacheHit = false;

  std::vector<int64_t> splitsMatrix;  // alltoall (never fused): setSize x setSize rows,
                                      // row = sending set rank, column = receiving set rank
  ProcessSetChange processSet;        // add/remove-process-set
  int32_t lastJoinedRank = -1;        // join
  bool withJoinedRanks = false;       // some ranks joined: they contribute zeros
  ResponseError errorCode = ResponseError::None;  // kind == Error
  std::string errorMessage;

  size_t tensorCount() const { return names.size(); }
  // As decoded from the wire: a cache hit whose tensors are named by their slots alone.
  bool slotsOnly() const { return cacheHit && names.empty(); }
};

}  // namespace hora
