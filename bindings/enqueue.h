#pragma once
// The one way tensors enter the engine from Python: _core.enqueue (the tensors as given) and
// _core.submit (the frontends' pipeline, submit.cc) both end here. GIL held.
#include <pybind11/pybind11.h>

#include <optional>
#include <string>
#include <vector>

namespace hora::bindings {

struct EnqueueArgs {
  int kind = 0;
  std::vector<pybind11::object> tensors;  // DLPack producers or capsules; none for join/barrier
  std::vector<std::string> names;         // one per tensor (one for join/barrier)
  int processSetId = 0;
  int reduceOp = 1;
  double prescale = 1.0;
  double postscale = 1.0;
  int rootRank = 0;
  pybind11::object splits = pybind11::none();
  std::string callSite;
  std::vector<std::optional<std::string>> dtypeOverrides;  // empty, or one per tensor
};

// Imports every tensor, enqueues them as one group and returns one Handle per name.
pybind11::list enqueueTensors(EnqueueArgs args);

}  // namespace hora::bindings
