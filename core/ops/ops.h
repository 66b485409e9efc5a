#pragma once
// One function per op family. Each runs a response on this rank, writes results into the
// entries' tensors (in place) or their handles' outputs, and throws on failure; the caller
// completes the handles. Execution order and arguments are agreed by the coordinator, so every
// member of the process set makes the same collective calls.
#include "core/ops/op_context.h"

namespace hora {

void runAllreduce(const Response& r, OpContext& cx);
void runAdasum(const Response& r, OpContext& cx);
void runAllgather(const Response& r, OpContext& cx);
void runBroadcast(const Response& r, OpContext& cx);
void runAlltoall(const Response& r, OpContext& cx);
void runReducescatter(const Response& r, OpContext& cx);

// Scale factors as the reference applies them: Average is Sum followed by postscale / size.
double effectivePostscale(const Response& r, int setSize);

// Average of an 8- or 16-bit integer tensor: summed in int32, then scaled back into the type,
// so three or more ranks do not wrap the sum.
bool sumsWide(const Response& r);

}  // namespace hora
