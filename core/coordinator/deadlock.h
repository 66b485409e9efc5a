#pragma once
// Deadlock verdict: which ranks wait for something that can never happen.
//
// A rank that blocks in a frontend wait (without a timeout) cannot submit anything new until that
// wait ends. Given, for every pending tensor, the ranks that submitted it and the ranks it still
// needs, and which ranks are blocked, findDeadlockedRanks() returns the blocked ranks that no
// sequence of future submissions can release: every tensor they submitted misses a rank that is
// itself blocked for good. A rank not blocked may still submit anything (it may be computing or
// checkpointing), so it releases every tensor it is missing from; a blocked rank with no pending
// tensor waits for something negotiation does not see, so it is treated as free as well.
//
// Pure function, no state.
#include <vector>

namespace hora {

struct PendingView {
  std::vector<int> submitted;  // world ranks that asked for the tensor
  std::vector<int> missing;    // world ranks that must still ask before it can run
};

// blocked[r]: world rank r is blocked in a wait. Returns the deadlocked world ranks, ascending;
// empty when every pending tensor may still run.
std::vector<int> findDeadlockedRanks(const std::vector<PendingView>& pending,
                                     const std::vector<bool>& blocked);

}  // namespace hora
