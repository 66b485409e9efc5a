#pragma once
// Transport-neutral checks of the Communicator collectives, shared by every transport's tests: the
// gtest matrix (ranks as threads over an in-memory store) and the MPI driver (ranks as processes).
//
// A Case names one collective call (collective, communicator size, element or byte count, dtype,
// reduce op, root, ...). runCase() builds this rank's input deterministically from the case and the
// rank's data identity, runs the call, and compares the result with a reference computed here, not
// by the engine's kernels: NumPy's semantics per dtype (integers wrap; bool Sum/Max are OR,
// Product/Min AND; float16 and bfloat16 are widened to float, reduced, and rounded back to nearest
// even after every step, as the engine defines them). The reference folds in rank order; inputs are
// exact (order-independent) unless the transport promises rank-order floating reductions, in which
// case floating Sum/Product allreduce inputs make the order visible and the check is bit-exact.
// Integer inputs span the full range, so sums and products wrap, unless the transport leaves
// overflow undefined.
//
// Every rank of the communicator must run the same cases in the same order. runCase() returns ""
// when the case passed on this rank, else what went wrong; it throws only what the transport
// throws.
#include <cstddef>
#include <string>
#include <vector>

#include "core/common/dtype.h"
#include "core/store/store.h"
#include "core/transport/communicator.h"

namespace hora {
namespace test {

enum class Collective {
  Allreduce,
  ReduceScatter,
  Allgatherv,
  Broadcast,
  Alltoallv,
  Barrier,
  SendRecv
};

struct Case {
  Collective collective = Collective::Allreduce;
  int ranks = 1;     // size of the communicator the case runs on
  size_t count = 0;  // elements (Allreduce, ReduceScatter base) or bytes (the others)
  DataType dtype = DataType::UInt8;
  ReduceOp op = ReduceOp::Sum;
  int root = 0;          // Broadcast: the root; Barrier: the rank that enters last
  bool inPlace = false;  // Allgatherv: this rank's block already sits in the output
};

struct CheckContext {
  // The transport reduces floating Sum/Product in rank order, bit for bit, at every size.
  bool rankOrderedFloats = false;
  // Integer sums and products wrap on overflow, as in NumPy (the engine's own kernels). When false,
  // integer inputs stay small enough never to overflow.
  bool integersWrap = true;
  // members[i] is the data identity of communicator rank i (its world rank for a subset); empty
  // means 0..size-1.
  std::vector<int> members;
  // Barrier: the store every rank leaves its "entered" mark in, and a key prefix unique to this
  // run of the case (shared by its ranks).
  Store* store = nullptr;
  std::string storePrefix;
};

// "Allreduce", "ReduceScatter", ...
const char* collectiveName(Collective c);
// The case's name without the collective, e.g. "np3_count1003_float32_Sum", "np4_bytes17_root2",
// "np3_late1". A C identifier, so gtest can use it as a parameter name.
std::string caseName(const Case& c);
// "Allreduce/np3_count1003_float32_Sum".
std::string fullCaseName(const Case& c);

// The cases of one collective for one communicator size: counts 0, 1, odd, not divisible by the
// size, and (with large) just below and above the switch points of the algorithm table and across
// several pipeline segments; every dtype and reduce op; every root; every late rank.
std::vector<Case> matrixCases(Collective c, int ranks, bool large = true);
// Every collective's cases, in a fixed order.
std::vector<Case> allMatrixCases(int ranks, bool large = true);

// An element count whose per-rank ring block spans several pipeline segments.
size_t multiSegmentCount(int ranks, DataType dtype);

std::string runCase(Communicator& comm, const Case& c, const CheckContext& context);

}  // namespace test
}  // namespace hora
