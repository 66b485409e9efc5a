// hora_scale_sim: runs NegotiationSim for every (N, T) asked and the alpha-beta allreduce model,
// and prints one JSON document on stdout (bench/scale.py reads it).
//
//   hora_scale_sim [--ranks 8,16,...] [--tensors 1,10,...] [--steps 4] [--order same|random|both]
//       [--chunks 4] [--tensor-bytes 16384] [--cache-capacity 1024] [--fusion-threshold B]
//       [--budget 4000000] [--thrash-budget 320000] [--alpha-us 5] [--gbits 10] [--intra-alpha-us
//       A] [--intra-gbits G]
//       [--ranks-per-host 8] [--no-model] [--no-negotiation]
//
// --budget skips an (N, T) whose N x T (tensor submissions per step) exceeds it, --thrash-budget
// one whose T exceeds the cache capacity and N x T exceeds it; skipped cells are listed in the
// output. Step 0 is uncached (the first negotiation of every tensor); the
// later steps run from the response cache and their median is the steady state.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "bench/scale/allreduce_model.h"
#include "bench/scale/negotiation_sim.h"
#include "bench/scale/sim_report.h"

namespace {

std::vector<long long> parseList(const std::string& s) {
  std::vector<long long> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hora::scale;
  RunOptions o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--ranks") {
      o.ranks.clear();
      for (auto v : parseList(next())) o.ranks.push_back(static_cast<int>(v));
    } else if (a == "--tensors") {
      o.tensors.clear();
      for (auto v : parseList(next())) o.tensors.push_back(static_cast<int>(v));
    } else if (a == "--steps") {
      o.steps = std::stoi(next());
    } else if (a == "--order") {
      o.order = next();
    } else if (a == "--chunks") {
      o.base.chunks = std::stoi(next());
    } else if (a == "--tensor-bytes") {
      o.base.tensorBytes = std::stoll(next());
    } else if (a == "--cache-capacity") {
      o.base.cacheCapacity = std::stoll(next());
    } else if (a == "--fusion-threshold") {
      o.base.fusionThreshold = std::stoll(next());
    } else if (a == "--budget") {
      o.budget = std::stoll(next());
    } else if (a == "--thrash-budget") {
      o.thrashBudget = std::stoll(next());
    } else if (a == "--alpha-us") {
      o.fabric.inter.alpha = std::stod(next()) * 1e-6;
    } else if (a == "--gbits") {
      o.fabric.inter.beta = 8.0 / (std::stod(next()) * 1e9);
    } else if (a == "--intra-alpha-us") {
      o.intraAlpha = std::stod(next()) * 1e-6;
    } else if (a == "--intra-gbits") {
      o.intraBeta = 8.0 / (std::stod(next()) * 1e9);
    } else if (a == "--ranks-per-host") {
      o.fabric.ranksPerHost = std::stoi(next());
    } else if (a == "--no-model") {
      o.model = false;
    } else if (a == "--no-negotiation") {
      o.negotiation = false;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  o.fabric.intra = o.fabric.inter;
  if (o.intraAlpha >= 0) o.fabric.intra.alpha = o.intraAlpha;
  if (o.intraBeta >= 0) o.fabric.intra.beta = o.intraBeta;
  std::string json =
      runAll(o, [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
  std::fputs(json.c_str(), stdout);
  return 0;
}
