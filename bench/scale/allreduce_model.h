#pragma once
// An alpha-beta model of the data plane: the time of one allreduce of `bytes` per algorithm Hora
// can run, from the rounds and bytes each algorithm's code moves (allreduce_model.cc states them),
// and the algorithm Hora's real chooseAllreduce (core/collectives/algorithm_table.h) picks.
//
// A link costs alpha + m * beta for a message of m bytes (alpha: latency, beta: seconds per
// byte). Two levels: ranks on one host talk over `intra`, ranks on different hosts over `inter`;
// ranks are placed host by host (ranks h*L .. h*L+L-1 on host h). A rank's messages to several
// peers are sent one after the other (runTransfers drives them from one thread through one NIC),
// so their costs add; a rank sends and receives at the same time.
//
// Modelled, not measured: no congestion, no CPU cost of reductions or copies.
#include <cstddef>
#include <string>

#include "core/collectives/algorithm_table.h"

namespace hora {
namespace scale {

struct LinkCost {
  double alpha = 5e-6;       // seconds
  double beta = 8.0 / 10e9;  // seconds per byte (10 Gbit/s)
};

struct Fabric {
  LinkCost intra;
  LinkCost inter;
  int ranksPerHost = 1;  // L; the job has N / L hosts
};

double ringSeconds(int n, double bytes, const Fabric& f);
double recursiveDoublingSeconds(int n, double bytes, const Fabric& f);
double rankOrderedSeconds(int n, double bytes, const Fabric& f);
double chainOrderedSeconds(int n, double bytes, const Fabric& f);
double bruckOrderedSeconds(int n, double bytes, const Fabric& f);
double gatherFoldSeconds(int n, double bytes, const Fabric& f);
// Local reduce-scatter, cross allreduce between hosts (the algorithm the table picks for H ranks
// and bytes / L), local allgather; n / f.ranksPerHost hosts.
double hierarchicalSeconds(int n, double bytes, size_t elementSize, bool rankOrder,
                           const Fabric& f);
// The alpha-beta lower bound of an allreduce. One host: ceil(log2 n) latencies (a value must
// reach every rank through a tree of messages) plus 2 (n-1)/n * bytes through each rank's link
// (every rank must send its share out and receive everyone else's). Several hosts (each rank with
// its own link to other hosts): the larger of log2 n latencies of the faster link and log2 H of
// the inter-host link, plus the larger of 2 (n-1)/n * bytes at the faster link's speed and
// 2 (H-1)/H * bytes over a host's L inter-host links.
double lowerBoundSeconds(int n, double bytes, const Fabric& f);

// Hora's choice for `bytes` of `elementSize`-byte elements on n ranks.
collectives::AllreduceAlgorithm realChoice(int n, size_t bytes, size_t elementSize, bool rankOrder);
double secondsOf(collectives::AllreduceAlgorithm a, int n, double bytes, const Fabric& f);
const char* algorithmName(collectives::AllreduceAlgorithm a);

}  // namespace scale
}  // namespace hora
