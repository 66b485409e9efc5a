#include "core/transport/mpi/mpi_datatypes.h"

#include <string>
#include <utility>

#include "core/common/errors.h"
#include "core/common/reduce.h"
#include "core/transport/mpi/mpi_context.h"

namespace hora {
namespace mpi {
namespace {

// MPI calls it as inoutvec[i] = invec[i] op inoutvec[i]; every op here is commutative.
template <DataType D, ReduceOp O>
void ownReduce(void* invec, void* inoutvec, int* len, MPI_Datatype*) {
  if (*len > 0) reduceInto(inoutvec, invec, static_cast<size_t>(*len), D, O);
}

template <DataType D>
void createFor(MPI_Op ops[4]) {
  checkMpi(MPI_Op_create(&ownReduce<D, ReduceOp::Sum>, 1, &ops[0]), "MPI_Op_create");
  checkMpi(MPI_Op_create(&ownReduce<D, ReduceOp::Min>, 1, &ops[1]), "MPI_Op_create");
  checkMpi(MPI_Op_create(&ownReduce<D, ReduceOp::Max>, 1, &ops[2]), "MPI_Op_create");
  checkMpi(MPI_Op_create(&ownReduce<D, ReduceOp::Product>, 1, &ops[3]), "MPI_Op_create");
}

}  // namespace

MPI_Datatype mpiElementType(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8: return MPI_UINT8_T;
    case DataType::Int8: return MPI_INT8_T;
    case DataType::UInt16: return MPI_UINT16_T;
    case DataType::Int16: return MPI_INT16_T;
    case DataType::Int32: return MPI_INT32_T;
    case DataType::Int64: return MPI_INT64_T;
    // MPI has no half-precision types: the 16-bit floats travel as 16-bit words and are reduced by
    // the ops created below.
    case DataType::Float16: return MPI_UINT16_T;
    case DataType::BFloat16: return MPI_UINT16_T;
    case DataType::Float32: return MPI_FLOAT;
    case DataType::Float64: return MPI_DOUBLE;
    case DataType::Bool: return MPI_C_BOOL;
  }
  throw InvalidArgument("mpi: unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

int ownReductionIndex(DataType dtype) {
  for (int i = 0; i < kOwnReductionTypeCount; ++i) {
    if (kOwnReductionTypes[i] == dtype) return i;
  }
  return -1;
}

int elementwiseOpIndex(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return 0;
    case ReduceOp::Min: return 1;
    case ReduceOp::Max: return 2;
    case ReduceOp::Product: return 3;
    default: return -1;
  }
}

MpiReduction mpiReduction(const MpiContext& context, DataType dtype, ReduceOp op) {
  if (elementwiseOpIndex(op) < 0) {
    throw InvalidArgument(
        std::string("mpi: reduce op ") + reduceOpName(op) +
        " is not element-wise (Average is Sum then scaling; Adasum has its own op)");
  }
  if (ownReductionIndex(dtype) >= 0) return {mpiElementType(dtype), context.ownOp(dtype, op)};
  if (dtype == DataType::Bool) {
    // For booleans, Sum and Max are true when any rank's value is, Min and Product only when all
    // are.
    bool any = op == ReduceOp::Sum || op == ReduceOp::Max;
    return {MPI_C_BOOL, any ? MPI_LOR : MPI_LAND};
  }
  MPI_Op native = MPI_SUM;
  switch (op) {
    case ReduceOp::Min: native = MPI_MIN; break;
    case ReduceOp::Max: native = MPI_MAX; break;
    case ReduceOp::Product: native = MPI_PROD; break;
    default: break;
  }
  return {mpiElementType(dtype), native};
}

namespace {

// One row of ops per entry of kOwnReductionTypes, in its order, so the table is the only list.
template <size_t... I>
void createEach(MPI_Op ops[kOwnReductionTypeCount][4], std::index_sequence<I...>) {
  (createFor<kOwnReductionTypes[I]>(ops[I]), ...);
}

}  // namespace

void createOwnOps(MPI_Op ops[kOwnReductionTypeCount][4]) {
  createEach(ops, std::make_index_sequence<kOwnReductionTypeCount>());
}

void freeOwnOps(MPI_Op ops[kOwnReductionTypeCount][4]) {
  for (int d = 0; d < kOwnReductionTypeCount; ++d) {
    for (int i = 0; i < 4; ++i) {
      // Each entry goes back to MPI_OP_NULL, so freeing twice, or ops never made, does no harm.
      if (ops[d][i] != MPI_OP_NULL) MPI_Op_free(&ops[d][i]);
      ops[d][i] = MPI_OP_NULL;
    }
  }
}

}  // namespace mpi
}  // namespace hora
