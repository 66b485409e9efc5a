#pragma once
// The simulator's runs and their JSON: every (N, T, order) of RunOptions through NegotiationSim,
// then the alpha-beta model of one allreduce for every N and size (allreduce_model.h), the
// links each algorithm opens at every N (link_census.h) and the control tree's shape
// (control_census.h).
#include <functional>
#include <string>
#include <vector>

#include "bench/scale/allreduce_model.h"
#include "bench/scale/control_census.h"
#include "bench/scale/link_census.h"
#include "bench/scale/negotiation_sim.h"

namespace hora {
namespace scale {

struct RunOptions {
  std::vector<int> ranks{8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  std::vector<int> tensors{1, 10, 100, 200, 1000, 10000};
  int steps = 4;               // step 0 uncached, the median of the others cached
  std::string order = "both";  // same, random or both
  long long budget = 4000000;  // largest N x T simulated
  // Largest N x T simulated when T exceeds the cache capacity: every step then renegotiates in
  // full (LRU over a cache smaller than the step), which costs the simulator ~100x more per cell.
  long long thrashBudget = 320000;
  SimConfig base;
  Fabric fabric;
  double intraAlpha = -1, intraBeta = -1;  // main.cc only
  bool model = true;                       // the allreduce model and the link census
  int controlFanout = 32;                  // the control tree's census (HORA_CONTROL_FANOUT)
  bool negotiation = true;
};

struct CellResult {
  int ranks = 0, tensors = 0;
  bool randomOrder = false;
  StepStats uncached, cached;
  MemoryStats memory;
};

// Runs one (N, T, order): `steps` steps; cached is the step of median negotiation CPU after the
// first.
CellResult runCell(const SimConfig& config, int steps);
std::string stepJson(const StepStats& s);
// Every cell and the model, as one JSON document; progress gets a line per cell.
std::string runAll(const RunOptions& o, const std::function<void(const std::string&)>& progress);

}  // namespace scale
}  // namespace hora
