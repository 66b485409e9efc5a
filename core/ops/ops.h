#pragma once
// One function per op family. Each runs a response on this rank, writes results into the
// entries' tensors (in place) or their handles' outputs, and throws on failure; the caller
// completes the handles. Execution order and arguments are agreed by the coordinator, so every
// member of the process set makes the same collective calls.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/ops/op_context.h"

namespace hora {

void runAllreduce(const Response& r, OpContext& cx);
void runAdasum(const Response& r, OpContext& cx);
void runAllgather(const Response& r, OpContext& cx);
void runBroadcast(const Response& r, OpContext& cx);
void runAlltoall(const Response& r, OpContext& cx);
void runReducescatter(const Response& r, OpContext& cx);

// An allreduce that a round of local agreement can carry whole as every rank's eager payload
// (core/coordinator/local_agreement.h): one tensor, no prescale, reduced in its own dtype, over
// 2 or more ranks, of at most maxBytes. Its result folded from the payloads is bit for bit the
// exchange's: every algorithm folds in rank order wherever the order could change a bit.
// runAllreduce folds it from OpContext::payloads when the agreement round lent them.
bool foldsFromPayloads(const Response& r, int setSize, size_t maxBytes);

// Scale factors as the reference applies them: Average is Sum followed by postscale / size.
double effectivePostscale(const Response& r, int setSize);

// Average without a postscale factor: the sum is divided by the set size (correctly rounded for
// floats, exact truncating division for integers) instead of multiplied by postscale / size.
bool dividesBySize(const Response& r);

// Runs the step after the sum: the division of a plain Average, else the postscale factor.
// `dtype` is the buffer's type.
void finishReduction(const Response& r, void* buf, size_t count, int setSize);
void finishReduction(const Response& r, DataType dtype, void* buf, size_t count, int setSize);

// The int32 sum of an 8- or 16-bit Average back into the type, divided or scaled likewise.
void narrowFromInt32(const Response& r, const int32_t* wide, void* out, size_t count, int setSize);

// Average of an 8- or 16-bit integer tensor: summed in int32, then scaled back into the type,
// so three or more ranks do not wrap the sum.
bool sumsWide(const Response& r);

// Sum or Average of a float16 or bfloat16 tensor: the prescaled values (rounded into the type,
// as the reference does) are summed in float32 and rounded into the type once, so a sum rounds
// once at every rank count and a plain Average (divided in float32) of equal values is exact.
bool sumsInFloat(const Response& r);

// The float32 sum of a float16/bfloat16 tensor (`wide`, modified) into the type. A plain Average
// is divided before the rounding; any other factor scales the rounded sum in float32, as the
// reference scales a reduced buffer, so sum(x) * f equals (n * x) * f bit for bit.
void narrowFromFloat32Sum(const Response& r, float* wide, void* out, size_t count, int setSize);

// Rows of a dim0-row tensor that set rank k receives from a reducescatter over n ranks: the
// first dim0 % n ranks get one extra (reducescatter.cc; the GPU path splits the same way).
size_t reducescatterRows(int64_t dim0, int n, int k);

// What an alltoall moves on set rank `me` of n, from the agreed splits (splitsMatrix[i * n + j]
// rows go from set rank i to set rank j; alltoall.cc; the GPU path moves the same).
struct AlltoallPlan {
  std::vector<size_t> sendBytes, recvBytes;  // per set rank
  std::vector<int32_t> received;             // rows received from each set rank
  int64_t rows = 0;                          // rows of the output
};
AlltoallPlan planAlltoall(const Response& r, int n, int me);

}  // namespace hora
