#include "bench/scale/control_census.h"

#include <algorithm>

#include "core/transport/tcp/control_tree.h"

namespace hora {
namespace scale {

ControlCensus controlCensus(int ranks, int fanout, double alpha) {
  tcp::ControlTree tree(ranks, fanout);
  ControlCensus c;
  c.ranks = ranks;
  c.fanout = fanout;
  c.rank0Sockets = static_cast<int>(tree.children(0).size());
  c.starRank0Sockets = ranks - 1;
  c.rank0Copies = c.rank0Sockets;
  c.maxSockets = c.rank0Sockets;
  // The first relay has the most children of any relay; its parent adds one.
  if (ranks > 1) c.maxSockets = std::max<int>(c.maxSockets, tree.children(1).size() + 1);
  // The last rank is the deepest: ranks deepen with their number.
  c.depth = ranks > 1 ? tree.depth(ranks - 1) : 0;
  c.extraRoundTripS = c.depth > 1 ? 2.0 * (c.depth - 1) * alpha : 0.0;
  return c;
}

}  // namespace scale
}  // namespace hora
