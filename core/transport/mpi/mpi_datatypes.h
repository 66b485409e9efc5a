#pragma once
// The mapping from Hora's dtypes and reduce ops to MPI's.
//
// Data movement uses MPI's fixed-width types (float16 and bfloat16 travel as MPI_UINT16_T, bool
// as MPI_C_BOOL). Reductions use MPI's predefined ops where they mean what reduce.h means:
// integers and float32/float64 with MPI_SUM / MPI_MIN / MPI_MAX / MPI_PROD; bool with MPI_LOR
// (Sum, Max) and MPI_LAND (Product, Min). float16 and bfloat16, which MPI has no type for, use
// user-defined commutative MPI_Ops that call reduceInto() from core/common/reduce.h, so every
// transport rounds them the same way.
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

// Creates the user-defined ops: ops[0] for float16, ops[1] for bfloat16, each indexed by
// halfOpIndex(op). MPI must be initialised. Freed with freeHalfOps().
void createHalfOps(MPI_Op ops[2][4]);
void freeHalfOps(MPI_Op ops[2][4]);
// 0 Sum, 1 Min, 2 Max, 3 Product; -1 for ops that are not element-wise.
int halfOpIndex(ReduceOp op);

}  // namespace mpi
}  // namespace hora
