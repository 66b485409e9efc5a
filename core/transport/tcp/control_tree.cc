#include "core/transport/tcp/control_tree.h"

#include <string>

#include "core/common/errors.h"

namespace hora {
namespace tcp {

ControlTree::ControlTree(int size, int fanout) : size_(size), fanout_(fanout) {
  if (fanout < 1) {
    throw InvalidArgument("the control tree's fanout must be at least 1, not " +
                          std::to_string(fanout));
  }
}

std::vector<int> ControlTree::children(int rank) const {
  std::vector<int> out;
  for (long long c = firstChild(rank); c < size_ && c <= firstChild(rank) + fanout_ - 1; ++c) {
    out.push_back(static_cast<int>(c));
  }
  return out;
}

bool ControlTree::inSubtree(int root, int rank) const {
  if (rank < 0 || rank >= size_) return false;  // no rank of this world
  // Walking up from `rank` passes `root` when it is an ancestor; ranks only decrease on the way.
  while (rank > root) rank = parent(rank);
  return rank == root;
}

int ControlTree::childToward(int from, int rank) const {
  if (rank <= from || rank >= size_) return -1;
  int below = rank;
  while (below > from && parent(below) != from) below = parent(below);
  return below > from ? below : -1;
}

int ControlTree::depth(int rank) const {
  int hops = 0;
  for (; rank > 0; rank = parent(rank)) ++hops;
  return hops;
}

}  // namespace tcp
}  // namespace hora
