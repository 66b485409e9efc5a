#pragma once
// Start-up agreement: every rank's copy of a value that must be the same on all ranks (the static
// process sets given to init), checked with one small allgather so that a mismatch fails init on
// every rank, naming each rank's value, instead of hanging in a later collective (MPI's group
// creation waits forever for a member that never comes).
#include <cstdint>
#include <string>

#include "core/transport/communicator.h"

namespace hora {

// Throws InvalidArgument on every rank when the ranks' `value`s differ; `what` names the value
// in the message ("the process sets given to init"), which lists every rank's value.
void requireSameOnEveryRank(Communicator& world, const std::string& value, const std::string& what);

// Every rank's `mine`: true on every rank when all of them gave true.
bool trueOnEveryRank(Communicator& world, bool mine);
// Rank 0's `value`, on every rank.
int64_t rankZeroValue(Communicator& world, int64_t value);

}  // namespace hora
