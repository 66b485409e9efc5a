#include "bench/scale/sim_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace hora {
namespace scale {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::string countersJson(const LinkCounters& c) {
  std::ostringstream out;
  out << "{\"messages_sent\": " << c.messagesSent << ", \"bytes_sent\": " << c.bytesSent
      << ", \"messages_received\": " << c.messagesReceived
      << ", \"bytes_received\": " << c.bytesReceived << "}";
  return out.str();
}

std::string memoryJson(const MemoryStats& m) {
  std::ostringstream out;
  out << "{\"coordinator_bytes\": " << m.coordinatorBytes
      << ", \"coordinator_pending_bytes\": " << m.coordinatorPendingBytes
      << ", \"participant_bytes\": " << m.participantBytes << ", \"queue_bytes\": " << m.queueBytes
      << "}";
  return out.str();
}

}  // namespace

std::string stepJson(const StepStats& s) {
  std::ostringstream out;
  out << "{\"negotiation_cpu_s\": " << num(s.negotiationCpuS())
      << ", \"ingest_cpu_s\": " << num(s.ingestCpuS) << ", \"build_cpu_s\": " << num(s.buildCpuS)
      << ", \"decode_cpu_s\": " << num(s.decodeCpuS) << ", \"encode_cpu_s\": " << num(s.encodeCpuS)
      << ", \"cycles\": " << s.cycles << ", \"response_batches\": " << s.responseBatches
      << ", \"collectives\": " << s.collectives << ", \"full_requests\": " << s.fullRequests
      << ", \"peak_pending\": " << s.peakPending << ", \"liveness_cpu_s\": " << num(s.livenessCpuS)
      << ", \"deadlock_cpu_s\": " << num(s.deadlockCpuS) << ", \"rank0\": " << countersJson(s.rank0)
      << ", \"rank1\": " << countersJson(s.rank1) << "}";
  return out.str();
}

CellResult runCell(const SimConfig& config, int steps) {
  CellResult c;
  c.ranks = config.worldSize;
  c.tensors = config.tensors;
  c.randomOrder = config.randomOrder;
  NegotiationSim sim(config);
  c.uncached = sim.runStep();
  std::vector<StepStats> later;
  for (int s = 1; s < steps; ++s) later.push_back(sim.runStep());
  if (!later.empty()) {
    std::sort(later.begin(), later.end(), [](const StepStats& a, const StepStats& b) {
      return a.negotiationCpuS() < b.negotiationCpuS();
    });
    c.cached = later[later.size() / 2];
  }
  c.memory = sim.memory();
  return c;
}

std::string runAll(const RunOptions& o, const std::function<void(const std::string&)>& progress) {
  std::ostringstream out;
  const Fabric& f = o.fabric;
  out << "{\"settings\": {\"steps\": " << o.steps << ", \"chunks\": " << o.base.chunks
      << ", \"tensor_bytes\": " << o.base.tensorBytes
      << ", \"cache_capacity\": " << o.base.cacheCapacity
      << ", \"fusion_threshold\": " << o.base.fusionThreshold << ", \"budget\": " << o.budget
      << ", \"thrash_budget\": " << o.thrashBudget << ", \"inter_alpha_s\": " << num(f.inter.alpha)
      << ", \"inter_beta_s_per_byte\": " << num(f.inter.beta)
      << ", \"intra_alpha_s\": " << num(f.intra.alpha)
      << ", \"intra_beta_s_per_byte\": " << num(f.intra.beta)
      << ", \"ranks_per_host\": " << f.ranksPerHost << "},\n \"negotiation\": [";
  std::ostringstream skipped;
  bool first = true, firstSkip = true;
  std::vector<bool> orders;
  if (o.order != "random") orders.push_back(false);
  if (o.order != "same") orders.push_back(true);
  for (int n : o.negotiation ? o.ranks : std::vector<int>{}) {
    for (int t : o.tensors) {
      for (bool random : orders) {
        const char* order = random ? "random" : "same";
        const long long cell = static_cast<long long>(n) * t;
        if (cell > o.budget || (t > o.base.cacheCapacity && cell > o.thrashBudget)) {
          skipped << (firstSkip ? "" : ", ") << "{\"ranks\": " << n << ", \"tensors\": " << t
                  << ", \"order\": \"" << order << "\"}";
          firstSkip = false;
          continue;
        }
        SimConfig config = o.base;
        config.worldSize = n;
        config.tensors = t;
        config.randomOrder = random;
        CellResult c = runCell(config, o.steps);
        out << (first ? "\n  " : ",\n  ") << "{\"ranks\": " << n << ", \"tensors\": " << t
            << ", \"order\": \"" << order << "\", \"uncached\": " << stepJson(c.uncached)
            << ", \"cached\": " << stepJson(c.cached) << ", \"memory\": " << memoryJson(c.memory)
            << "}";
        first = false;
        progress("N=" + std::to_string(n) + " T=" + std::to_string(t) + " " + order +
                 ": rank 0 negotiation " + num(c.uncached.negotiationCpuS() * 1e3) +
                 " ms uncached, " + num(c.cached.negotiationCpuS() * 1e3) + " ms cached");
      }
    }
  }
  out << "],\n \"skipped\": [" << skipped.str() << "],\n \"model\": [";
  first = true;
  for (int n : o.model ? o.ranks : std::vector<int>{}) {
    for (size_t bytes = 4; bytes <= (size_t(256) << 20); bytes *= 4) {
      const double s = static_cast<double>(bytes);
      const double hier = hierarchicalSeconds(n, s, 4, true, f);
      out << (first ? "\n  " : ",\n  ") << "{\"ranks\": " << n << ", \"bytes\": " << bytes
          << ", \"ring_s\": " << num(ringSeconds(n, s, f))
          << ", \"recursive_doubling_s\": " << num(recursiveDoublingSeconds(n, s, f))
          << ", \"rank_ordered_s\": " << num(rankOrderedSeconds(n, s, f))
          << ", \"chain_ordered_s\": " << num(chainOrderedSeconds(n, s, f))
          << ", \"bruck_ordered_s\": " << num(bruckOrderedSeconds(n, s, f))
          << ", \"gather_fold_s\": " << num(gatherFoldSeconds(n, s, f))
          << ", \"hierarchical_s\": " << (hier < 0 ? std::string("null") : num(hier))
          << ", \"lower_bound_s\": " << num(lowerBoundSeconds(n, s, f))
          << ", \"choice_float_sum\": \"" << algorithmName(realChoice(n, bytes, 4, n >= 3))
          << "\", \"choice_order_free\": \"" << algorithmName(realChoice(n, bytes, 4, false))
          << "\"}";
      first = false;
    }
  }
  // The links each algorithm opens, beside the model of its time (the data plane's two costs).
  out << "],\n \"links\": [";
  first = true;
  for (int n : o.model ? o.ranks : std::vector<int>{}) {
    for (const LinkCensus& c : linkCensus(n, f.ranksPerHost)) {
      out << (first ? "\n  " : ",\n  ") << "{\"ranks\": " << n << ", \"algorithm\": \""
          << c.algorithm << "\", \"sampled\": " << c.sampled << ", \"max_peers\": " << c.maxPeers
          << ", \"mean_peers\": " << num(c.meanPeers) << ", \"rank0_peers\": " << c.rank0Peers
          << ", \"max_cross_host_peers\": "
          << (c.maxCrossHostPeers < 0 ? std::string("null") : std::to_string(c.maxCrossHostPeers))
          << ", \"max_host_peers\": "
          << (c.maxHostPeers < 0 ? std::string("null") : std::to_string(c.maxHostPeers)) << "}";
      first = false;
    }
    progress("N=" + std::to_string(n) + ": link census done");
  }
  // The control plane: rank 0's connections and copies per broadcast, star against tree.
  out << "],\n \"control\": [";
  first = true;
  for (int n : o.model ? o.ranks : std::vector<int>{}) {
    ControlCensus c = controlCensus(n, o.controlFanout, f.inter.alpha);
    out << (first ? "\n  " : ",\n  ") << "{\"ranks\": " << n << ", \"fanout\": " << c.fanout
        << ", \"rank0_sockets\": " << c.rank0Sockets
        << ", \"star_rank0_sockets\": " << c.starRank0Sockets
        << ", \"max_sockets\": " << c.maxSockets << ", \"depth\": " << c.depth
        << ", \"rank0_copies\": " << c.rank0Copies
        << ", \"extra_round_trip_s\": " << num(c.extraRoundTripS) << "}";
    first = false;
  }
  out << "]}\n";
  return out.str();
}

}  // namespace scale
}  // namespace hora
