#pragma once
// Runtime: the one object that owns the tensor queue, the coordinator, the transports, the fusion
// buffers and the timeline of a process. Only bindings/ holds the process-wide instance; the rest
// of the engine receives what it needs by reference.
//
// Contract:
// - start() is collective: it blocks until every rank has connected (or throws TimeoutError).
// - enqueue() is thread-safe and never blocks on the network. It validates what can be checked
//   locally (dtype, splits, duplicate in-flight names: InvalidArgument) and returns one Handle per
//   request. The requests of one call are a group: they are negotiated and fused together.
// - Cross-rank problems (mismatched shapes, dtypes, ops, roots, scales) complete the handles with
//   MismatchError on every rank; the runtime stays usable.
// - A peer failure or shutdown completes every pending handle with an error within a bounded
//   time (HORA_TIMEOUT_SECONDS); afterwards enqueue() throws ShutdownError.
// - shutdown() is idempotent; a new Runtime may be started afterwards (re-init).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/common/settings.h"
#include "core/common/tensor.h"
#include "core/coordinator/handle.h"
#include "core/messages/messages.h"
#include "core/store/store.h"
#include "core/transport/shared_pool.h"

namespace hora {

struct Topology {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  int localSize = 1;
  int crossRank = 0;
  int crossSize = 1;
};

struct RuntimeOptions {
  Topology topology;
  std::string transport = "tcp";  // CPU collectives: "tcp" (alias "gloo") or "mpi"
  std::string controller;         // negotiation; "" = the same as transport. Different names
                                  // connect both (core/transport/connect.h)
  std::string storeHost;          // rendezvous store; "" = none needed (size 1, MPI alone), or
  int storePort = 0;              // bootstrapped over MPI when TCP runs beside it. Otherwise a
                                  // launcher, or the bindings on rank 0, serve the store
  int generation = 0;             // how many times this process initialised before: keys of
                                  // each init live under their own prefix in the store
  // Who serves the store: a launcher or rank 0 (a rank whose store fails names it).
  StoreOwner storeOwner = StoreOwner::Launcher;
  std::string secret;
  std::string listenHost;  // address to listen on for peers; "" = default
  int64_t mpiComm = -1;    // with "mpi": Fortran handle of the communicator to run
                           // on (hora.init(comm=...)); -1 = MPI_COMM_WORLD
  std::vector<std::vector<int>> processSets;  // static sets, ids 1, 2, ... in this order
  Settings settings;
};

// What the engine of this rank did so far, for tests and benchmarks: the cost of the hand-off
// between frontend threads and the background thread, counted rather than timed.
struct EngineCounters {
  uint64_t controlMessagesSent = 0;  // negotiation messages this rank sent to other ranks
  uint64_t loopWakeups = 0;     // wake-ups of the background thread asked by other threads (one
                                // that found another still pending counts too)
  uint64_t waitEndReports = 0;  // a worker's "no longer blocked" reports, sent on their own
  uint64_t callerOps = 0;       // collectives a waiting frontend thread ran itself
  uint64_t foldedOps = 0;       // allreduces folded from the data published with their agreement
                                // round (local_agreement.h), not exchanged again
  uint64_t agreedRounds = 0;    // rounds of local agreement run here: each the collectives every
                                // rank held at once, run together
  uint64_t loopCycles = 0;      // cycles the background thread ran (it sleeps between them)
};

class Runtime {
 public:
  static std::unique_ptr<Runtime> start(const RuntimeOptions& options);
  virtual ~Runtime() = default;

  virtual void shutdown() = 0;
  virtual bool running() const = 0;
  virtual const Topology& topology() const = 0;
  // A snapshot: the settings given at start, with the values autotune has chosen since (cycle
  // time, fusion threshold). Safe from any thread; later tuning does not change a returned copy.
  virtual Settings settings() const = 0;

  std::vector<std::shared_ptr<Handle>> enqueue(std::vector<OpRequest> requests) {
    return enqueue(std::move(requests), false);
  }
  // callerWaits: the calling thread waits for these handles at once (a blocking frontend call).
  // Where waiting threads drive the loop (HORA_CALLER_DRIVES), the loop is then not woken: the
  // wait drives the work itself, or wakes the loop when it cannot.
  virtual std::vector<std::shared_ptr<Handle>> enqueue(std::vector<OpRequest> requests,
                                                       bool callerWaits) = 0;

  // A frontend thread is blocked in a wait without timeout between waitBegin() and waitEnd()
  // (calls from several threads count up). While any is, this rank reports itself blocked, and
  // the coordinator fails collectives that blocked ranks wait for and can never get
  // (core/coordinator/deadlock.h). A wait with a timeout must not be marked: its caller may go
  // on to submit something else. Cheap and thread-safe. driven: the thread waits on a handle it
  // may drive (Handle::driven()); the loop then hears of the wait when the thread stops driving
  // without its result (WaitDriver::depart), not at once.
  virtual void waitBegin(bool driven) = 0;
  virtual void waitEnd() = 0;

  // Process sets. Id 0 is the world. add/remove are collective over the world: they check their
  // arguments (InvalidArgument; dynamic sets must be enabled), submit the change and return its
  // handle, which completes once every rank made the same call (the new id in processSetId). The
  // caller waits for it with a bound (HORA_TIMEOUT_SECONDS in the bindings), marked blocked: the
  // bound is an error, not a way out, so a rank waiting here can deadlock like any other.
  // callSite (file:line of the frontend call) names the call in stall and deadlock reports.
  virtual std::shared_ptr<Handle> addProcessSet(const std::vector<int>& ranks,
                                                const std::string& callSite) = 0;
  virtual std::shared_ptr<Handle> removeProcessSet(int id, const std::string& callSite) = 0;
  virtual std::vector<int> processSetRanks(int id) const = 0;  // InvalidArgument if unknown
  virtual std::vector<int> processSetIds() const = 0;

  // "tcp" or "mpi"; "<controller>+<data>" when the roles differ (see transportLabel()).
  virtual std::string transportName() const = 0;

  // Timeline (written by world rank 0; a no-op on other ranks). start replaces a running one.
  virtual void startTimeline(const std::string& path, bool markCycles) = 0;
  virtual void stopTimeline() = 0;

  // Totals since start; safe from any thread.
  virtual EngineCounters counters() const = 0;

  // Memory that the other ranks read in place when an allreduce's input lies there (the shared
  // arena, core/transport/shared_pool.h), or null when the job's transport has none. Safe from
  // any thread; blocks allocated from it stay valid after shutdown.
  virtual std::shared_ptr<SharedPool> sharedPool() const = 0;
};

}  // namespace hora
