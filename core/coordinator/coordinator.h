#pragma once
// Coordinator: the negotiation state kept by world rank 0, the one place that decides, for every
// process set, which tensors run and in which order.
//
// Ranks push RequestBatches as their tensors become ready: full requests for tensors the cache
// does not know, one bit per cached tensor otherwise. A tensor is ready when every member of its
// set that has not joined has asked for it; while some rank has joined, an op other than allreduce
// or barrier is ready (to fail) as soon as one rank asks. buildBatch() then validates each ready
// tensor across ranks (mismatches become Error responses), assigns cache slots, fuses compatible
// responses and returns the next ResponseBatch, which every rank applies in sequence order. One
// sequencer for all sets is what keeps ranks that belong to several sets from executing two sets'
// collectives in different orders and deadlocking.
//
// Cache bits are checked against the sender's applied-batch count: a bit for a slot that changed
// in a batch the sender had not yet applied is ignored, and the sender resends that tensor in full
// when it applies the eviction. Slots with outstanding bits are never chosen as LRU victims.
//
// Cost at scale: a cache bit costs O(1) (a bit and a count in CacheHits, no lookup by name after
// the first report of the slot), and deciding whether a tensor is ready O(1) while no rank has
// joined, so rank 0's work per step grows with the reports it receives (N x T bits) and nothing
// more. Listing who reported (stall and deadlock reports, liveness) scans the slot's row of N bits.
// A full request like the first one for its tensor (the usual case) is kept as a bit too
// (PendingTensor::twins): what rank 0 holds for an uncached step grows with N x T bits, not
// N x T requests.
//
// Deadlocks: every batch says whether a frontend thread of its sender is blocked in a wait. A
// rank counts as blocked only while that report is current (sent after applying every batch built
// so far: a newer batch may have released it). When blocked ranks hold pending tensors that can
// never run (core/coordinator/deadlock.h) and nothing changes for kDeadlockConfirm,
// failDeadlocks() answers each of those tensors with an error naming, per rank, the collectives
// it waits in and their call sites; the job goes on.
//
// Pure logic, no I/O; owned and driven by the background thread of rank 0.
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/common/settings.h"
#include "core/common/time.h"
#include "core/coordinator/autotuner.h"
#include "core/coordinator/cache_hits.h"
#include "core/coordinator/codec.h"
#include "core/coordinator/process_set_table.h"
#include "core/coordinator/response_cache.h"
#include "core/timeline/timeline.h"

namespace hora {

// A tensor some ranks asked for and others not yet; read by the stall inspector.
struct PendingTensor {
  int processSetId = 0;
  std::string name;
  std::vector<Request> requests;  // full requests, in arrival order
  // Ranks whose full request equals requests.front() in all but the rank (name, call site and
  // every parameter): a bit each instead of a stored copy, so a tensor that N ranks ask for alike
  // holds one request, not N. Sized to the world on the first twin.
  std::vector<uint64_t> twins;
  int twinCount = 0;
  int slot = -1;  // the cache slot ranks reported it by, -1 when none (Coordinator::hitRanks)
  uint64_t arrival = 0;
  Clock::time_point firstSeen;
};

class Coordinator {
 public:
  // timeline may be null (no negotiation events are recorded then).
  Coordinator(int worldSize, const ProcessSetTable& sets, const Settings& settings,
              int nextProcessSetId, Timeline* timeline = nullptr);

  // The batch's full requests are moved into the pending tensors (the const form copies them).
  void ingest(int fromRank, RequestBatch&& batch);
  void ingest(int fromRank, const RequestBatch& batch) { ingest(fromRank, RequestBatch(batch)); }
  void requestShutdown(const std::string& reason);
  // Rank 0 reports its own wait state here (other ranks through their batches).
  void setWaiting(int rank, bool waiting, uint64_t appliedBatches);
  // Queues error responses for deadlocked tensors (see above); true when it did.
  bool failDeadlocks(Clock::time_point now);
  // Whether failDeadlocks() needs to run again soon.
  bool watchingDeadlocks() const { return !disabledDeadlocks_ && !pending_.empty(); }
  // The next batch, or false when there is nothing to tell the ranks.
  bool buildBatch(ResponseBatch* out);
  // The ranks ran the cached response in `slot` without asking (local_agreement.h): it counts
  // as used now, so that the choice of a slot to evict passes it over.
  void ranLocally(int slot);

  const std::unordered_map<std::string, PendingTensor>& pending() const { return pending_; }
  // World ranks that some pending tensor still misses, ascending (control-channel liveness).
  std::vector<int> awaitedRanks() const;
  const std::vector<bool>& joined() const { return joined_; }
  // World ranks that reported p by cache bit, ascending.
  std::vector<int> hitRanks(const PendingTensor& p) const;
  // World ranks that asked for p, in full or by bit, ascending.
  std::vector<int> submitters(const PendingTensor& p) const;
  // For reports: the op kind and the call site of the earliest submission known.
  const char* kindOf(const PendingTensor& p) const;
  std::string callSiteOf(const PendingTensor& p) const;

 private:
  void addFull(int fromRank, Request&& request);
  // Counts `request` as a twin of p's first request when it is one; false when it is kept in full
  // (p's first request among them).
  bool addTwin(PendingTensor& p, int fromRank, const Request& request);
  // The twins as full requests again, for what lists every rank's request (a mismatch).
  static void expandTwins(PendingTensor& p);
  void addHit(int fromRank, int slot, uint64_t senderApplied);
  void addJoin(int fromRank, const Request& request);
  PendingTensor& pendingFor(const std::string& key, int processSetId, const std::string& name,
                            OpKind kind);
  void markReady(const PendingTensor& p, int fromRank);
  void evictSlot(int slot);
  bool isReady(const PendingTensor& p) const;
  std::vector<int> missingRanks(const PendingTensor& p) const;
  // Bit r set when world rank r asked for p (full or by bit): O(N / 64 + requests).
  std::vector<uint64_t> submittedBits(const PendingTensor& p) const;
  std::vector<int> missingRanks(const PendingTensor& p, const std::vector<uint64_t>& have) const;
  // Members of the set, -1 when it is gone; the world set without taking the table's lock.
  int setSize(int processSetId) const;
  std::string deadlockReport(const std::vector<int>& stuck) const;
  // Whether the op may run while some ranks have joined (allreduce and barrier only).
  bool runsWhileJoined(const PendingTensor& p) const;
  Response respond(const std::string& key, PendingTensor& p);
  void assignSlot(const std::string& key, const PendingTensor& p, Response& r);
  void finishProcessSetResponse(Response& r);

  int worldSize_;
  const ProcessSetTable& sets_;
  Timeline* timeline_;
  Settings settings_;
  ResponseCache cache_;
  CacheHits hits_;                       // per slot: the ranks whose bit for it is pending
  std::vector<uint64_t> slotChangedAt_;  // sequence of the batch that last changed each slot
  std::unordered_map<std::string, PendingTensor> pending_;
  uint64_t arrivals_ = 0;
  uint64_t nextSequence_ = 0;
  std::vector<int32_t> evictions_;
  std::vector<Response> immediate_;  // responses decided while ingesting (join)
  std::vector<bool> joined_;
  std::vector<uint64_t> joinedBits_;  // joined_ as bits, for whole-word scans
  int joinedCount_ = 0;
  int lastJoined_ = -1;
  std::string joinName_;
  int nextProcessSetId_;
  std::deque<int> freedProcessSetIds_;  // reused first, oldest first, as Horovod does
  Autotuner autotuner_;
  std::string firstKey_;             // the first tensor ever negotiated: a new step when it recurs
  double newCycleTimeMs_ = -1;       // to announce in the next batch
  int64_t newFusionThreshold_ = -1;  // likewise
  bool warnedFull_ = false;
  bool disabledDeadlocks_;                  // HORA_STALL_CHECK_DISABLE turns the check off too
  std::vector<bool> waiting_;               // last wait state each rank reported
  std::vector<uint64_t> waitReportedAt_;    // the sender's applied batches at that report
  uint64_t changes_ = 0;                    // ingested batches and wait-state changes
  uint64_t deadlockSeenAt_ = ~uint64_t(0);  // changes_ when the current deadlock was first seen
  Clock::time_point deadlockSince_{};
  bool shutdown_ = false;
  std::string shutdownReason_;
};

}  // namespace hora
