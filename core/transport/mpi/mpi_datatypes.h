#pragma once
// The mapping from Hora's dtypes and reduce ops to MPI's.
//
// Data movement uses MPI's fixed-width types (float16 and bfloat16 travel as MPI_UINT16_T, bool
// as MPI_C_BOOL). Reductions use MPI's predefined ops where they mean what reduce.h means:
// 32/64-bit integers and float32/float64 with MPI_SUM / MPI_MIN / MPI_MAX / MPI_PROD; bool with
// MPI_LOR (Sum, Max) and MPI_LAND (Product, Min). The other types use user-defined commutative
// MPI_Ops that call reduceInto() from core/common/reduce.h, so every transport computes the same
// values: float16 and bfloat16, which MPI has no type for (rounded as reduce.h rounds), and 8- and
// 16-bit integers, whose sums and products must wrap as in NumPy (MPI leaves overflow undefined,
// and Open MPI's vectorised ops saturate them).
#include "core/common/dtype.h"
#include "core/transport/mpi/mpi_context.h"

namespace hora {
namespace mpi {

// The MPI datatype of one element of dtype.
MPI_Datatype mpiElementType(DataType dtype);

struct MpiReduction {
  MPI_Datatype type;
  MPI_Op op;
};

// The datatype and op to reduce dtype with op (Sum, Min, Max or Product). Throws
// InvalidArgument for Average and Adasum, which are not element-wise.
MpiReduction mpiReduction(const MpiContext& context, DataType dtype, ReduceOp op);

// The dtypes Hora reduces itself under MPI, in the order of the ops table below.
constexpr DataType kOwnReductionTypes[kOwnReductionTypeCount] = {
    DataType::Float16, DataType::BFloat16, DataType::UInt8,
    DataType::Int8,    DataType::UInt16,   DataType::Int16};

// Creates the user-defined ops: ops[ownReductionIndex(dtype)][elementwiseOpIndex(op)]. MPI must be
// initialised. Freed with freeOwnOps().
void createOwnOps(MPI_Op ops[kOwnReductionTypeCount][4]);
void freeOwnOps(MPI_Op ops[kOwnReductionTypeCount][4]);
// The row of dtype in the ops table; -1 when MPI's predefined ops reduce it.
int ownReductionIndex(DataType dtype);
// 0 Sum, 1 Min, 2 Max, 3 Product; -1 for ops that are not element-wise.
int elementwiseOpIndex(ReduceOp op);

}  // namespace mpi
}  // namespace hora
