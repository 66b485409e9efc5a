#pragma once
// NegotiationSim: N ranks' negotiation run as actors in one thread, on Hora's real code: every rank
// has its own TensorQueue and Participant, rank 0 also the Coordinator; RequestBatches and
// ResponseBatches travel encoded by the real codec through a SimNetwork (in-memory queues). No
// data moves: responses complete their tensors as soon as a rank applies them.
//
// A step: every rank submits the same T allreduces (float32, tensorBytes each, names grad.0 ...
// grad.T-1), in the same order on every rank or in a random order per rank, in `chunks` parts;
// after each part the ranks run one cycle (collect and send; rank 0 ingests every batch and builds
// batches until it has none; every rank applies them). Cycles continue until every tensor of the
// step completed (ranks resend in full what an eviction made them resend).
//
// Rank 0's negotiation CPU is CLOCK_THREAD_CPUTIME_ID around Coordinator::ingest and
// Coordinator::buildBatch only; the codec's share (decoding request batches, encoding response
// batches) is timed apart. Every rank reports that a thread of it waits (RequestBatch::waiting)
// with its last part of a step, as a training step's synchronize does.
//
// Single-threaded; not for concurrent use.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/scale/sim_network.h"
#include "core/coordinator/coordinator.h"
#include "core/coordinator/participant.h"
#include "core/coordinator/process_set_table.h"
#include "core/coordinator/tensor_queue.h"

namespace hora {
namespace scale {

struct SimConfig {
  int worldSize = 8;
  int tensors = 10;
  int64_t tensorBytes = 16 << 10;
  bool randomOrder = false;
  uint64_t seed = 1;
  int chunks = 4;  // parts each rank submits a step in, one cycle after each
  int64_t cacheCapacity = 1024;
  int64_t fusionThreshold = 128ll << 20;
  std::string callSite = "train.py:57";
};

struct StepStats {
  double ingestCpuS = 0;  // rank 0: Coordinator::ingest, every batch of the step
  double buildCpuS = 0;   // rank 0: Coordinator::buildBatch, every call of the step
  double decodeCpuS = 0;  // rank 0: decodeRequestBatch of the other ranks' batches
  double encodeCpuS = 0;  // rank 0: encodeResponseBatch, once per batch built
  int cycles = 0;
  int responseBatches = 0;  // batches rank 0 built (every other rank receives each)
  int collectives = 0;      // responses after fusion (collectives every rank runs)
  int fullRequests = 0;     // requests sent in full, every rank together
  size_t peakPending = 0;   // tensors pending at the coordinator after an ingest
  // Rank 0's periodic checks, one call each after every cycle's ingest, the dearest call of the
  // step: Coordinator::awaitedRanks (the liveness check, every 20 ms while tensors are pending)
  // and Coordinator::failDeadlocks (every 200 ms).
  double livenessCpuS = 0;
  double deadlockCpuS = 0;
  LinkCounters rank0;
  LinkCounters rank1;  // a non-zero rank (rank 1)
  double negotiationCpuS() const { return ingestCpuS + buildCpuS; }
};

// Estimated bytes of negotiation state (memory_estimate.h says how).
struct MemoryStats {
  size_t coordinatorBytes = 0;         // rank 0's Coordinator, its response cache included
  size_t coordinatorPendingBytes = 0;  // of which: the peak pending table of the last step
  size_t participantBytes = 0;         // any rank's Participant (response cache copy included)
  size_t queueBytes = 0;               // any rank's TensorQueue with T tensors in flight
};

class NegotiationSim {
 public:
  explicit NegotiationSim(const SimConfig& config);
  ~NegotiationSim();

  StepStats runStep();
  MemoryStats memory() const;
  const SimConfig& config() const { return config_; }

 private:
  struct Rank;
  void submit(int rank, int first, int count);
  void cycle(StepStats* stats);
  void apply(Rank& rank, const ResponseBatch& batch);
  bool allDone() const;

  SimConfig config_;
  Settings settings_;
  ProcessSetTable sets_;
  SimNetwork net_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::unique_ptr<Coordinator> coordinator_;
  std::vector<std::vector<int>> order_;  // per rank: tensor indices in submission order
  uint64_t step_ = 0;
  bool submittedAll_ = false;  // the current part is the step's last
  size_t peakPendingBytes_ = 0;
};

}  // namespace scale
}  // namespace hora
