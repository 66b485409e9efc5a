#pragma once
// The TCP control plane's shape at N ranks, from the real tree (core/transport/tcp/control_tree.h):
// the control connections rank 0 and the busiest rank hold, and the hops a message between rank 0
// and the deepest rank crosses, against the star (every rank connected to rank 0).
namespace hora {
namespace scale {

struct ControlCensus {
  int ranks = 0;
  int fanout = 0;
  int rank0Sockets = 0;      // the tree: rank 0's children
  int maxSockets = 0;        // the busiest rank (a relay: its parent and children)
  int starRank0Sockets = 0;  // the star: N - 1
  int depth = 0;             // links from rank 0 to the deepest rank (1 in a star)
  // Copies of one response batch rank 0 writes when it broadcasts (N - 1 in the star).
  int rank0Copies = 0;
  // What relaying adds to a worker's round trip to rank 0 and back: 2 (depth - 1) alphas.
  double extraRoundTripS = 0;
};

ControlCensus controlCensus(int ranks, int fanout, double alpha);

}  // namespace scale
}  // namespace hora
