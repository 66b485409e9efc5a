#pragma once
// The shape of the TCP control plane: a k-ary tree rooted at rank 0 (k = HORA_CONTROL_FANOUT).
// Rank r > 0 has parent (r-1)/k and children r*k+1 .. r*k+k (those below the job's size). Each
// rank connects to its parent only, so rank 0 holds at most k control connections at any size;
// with size <= k+1 the tree is the star of earlier versions (every rank a child of rank 0).
#include <vector>

namespace hora {
namespace tcp {

constexpr int kDefaultControlFanout = 32;

class ControlTree {
 public:
  // fanout < 1 is an InvalidArgument.
  ControlTree(int size, int fanout);

  int size() const { return size_; }
  int fanout() const { return fanout_; }
  int parent(int rank) const { return rank == 0 ? -1 : (rank - 1) / fanout_; }
  std::vector<int> children(int rank) const;
  bool hasChildren(int rank) const { return firstChild(rank) < size_; }
  // True when `rank` lies in the subtree rooted at `root` (a rank is in its own subtree).
  bool inSubtree(int root, int rank) const;
  // The child of `from` whose subtree holds `rank` (which must lie below `from`), else -1.
  int childToward(int from, int rank) const;
  // Links on the path from rank 0 down to `rank`.
  int depth(int rank) const;

 private:
  long long firstChild(int rank) const { return static_cast<long long>(rank) * fanout_ + 1; }

  int size_;
  int fanout_;
};

}  // namespace tcp
}  // namespace hora
