#pragma once
// Runs one response on this rank: finds the local entries of its tensors, picks the op function
// from the table, and completes the handles (success, or the error on every tensor involved).
#include "core/messages/messages.h"
#include "core/ops/op_context.h"

namespace hora {

// Throws only for errors that leave the communicator unusable (IoError, TimeoutError,
// InternalError); per-tensor failures are delivered through the handles, an op's refusal of its
// tensors (InvalidArgument) as InvalidCollectiveError.
void executeResponse(const Response& r, OpContext& cx);

}  // namespace hora
