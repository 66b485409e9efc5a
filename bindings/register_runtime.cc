// The process-wide Runtime lives here and only here. `state().runtime` is read under a short
// mutex (never held while blocking or while taking the GIL); init/shutdown/process-set changes are
// serialised by a second mutex that is only ever taken with the GIL released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bindings/dlpack.h"
#include "bindings/py_handle.h"
#include "bindings/register.h"
#include "core/common/errors.h"
#include "core/common/host_identity.h"
#include "core/common/settings.h"
#include "core/common/time.h"
#include "core/config.h"
#include "core/net/socket.h"
#include "core/runtime.h"
#include "core/store/tcp_store.h"
#include "core/transport/backends.h"
#include "core/transport/nccl/gpu_library.h"

namespace py = pybind11;

namespace hora::bindings {
namespace {

constexpr const char* kNotInitialized = "Hora has not been initialized; use hora.init().";

struct State {
  std::mutex mu;  // guards runtime
  std::shared_ptr<Runtime> runtime;

  std::mutex lifecycleMu;  // serialises start/shutdown; taken only without the GIL; guards:
  // Inits attempted per store ("host:port/secret"): the store keys of each init live apart. Per
  // store, not per process: a process reused for another job (Spark's and Ray's workers) starts
  // that job's count at 0 like the job's fresh processes.
  std::map<std::string, int> generations;
  // The rendezvous store rank 0 serves when no launcher does (torchrun, mpirun, Slurm). It
  // outlives shutdown() so that a re-init on the same port finds it; the generation keeps the
  // keys of each init apart.
  std::unique_ptr<TcpStoreServer> store;
  std::string storeIdentity;  // "host:port/secret" the store was started with
};

// Never destroyed: a runtime still running at interpreter exit dies with the process instead of
// being joined from a static destructor.
State& state() {
  static auto* s = new State();
  return *s;
}

std::shared_ptr<Runtime> current() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().runtime;
}

}  // namespace

std::shared_ptr<Runtime> currentRuntime() { return current(); }

std::shared_ptr<Runtime> requireRuntime() {
  auto rt = current();
  if (!rt) throw InvalidArgument(kNotInitialized);
  return rt;
}

namespace {

void setCurrent(std::shared_ptr<Runtime> rt) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().runtime = std::move(rt);
}

// Rank 0 of a job without a launcher serves the store on the address the ranks reach it at (see
// net::serverBindHost: the loopback for a local job), waiting until `deadline` for that name to
// resolve. Lifecycle lock held.
void serveRendezvous(const std::string& storeHost, int port, const std::string& secret,
                     Clock::time_point deadline) {
  if (port <= 0) throw InvalidArgument("serve_store needs a store port");
  State& s = state();
  std::string host = net::serverBindHost(storeHost, deadline);
  std::string identity = host + ":" + std::to_string(port) + "/" + secret;
  if (s.store && s.storeIdentity == identity) return;
  if (s.store) s.store->stop();
  s.store.reset();
  s.store = std::make_unique<TcpStoreServer>(host, port, secret);
  s.storeIdentity = identity;
}

void init(int rank, int size, int localRank, int localSize, int crossRank, int crossSize,
          const std::string& transport, const std::string& controller, const std::string& storeHost,
          int storePort, bool serveStore, const std::string& secret, const std::string& listenHost,
          const std::vector<std::vector<int>>& processSets, int64_t mpiComm, int generation,
          double startTimeoutSeconds, bool storeServedByRank0) {
  if (size < 1 || rank < 0 || rank >= size) {
    throw InvalidArgument("invalid topology: rank " + std::to_string(rank) + " of size " +
                          std::to_string(size));
  }
  if (localSize < 1 || localRank < 0 || localRank >= localSize || crossSize < 1 || crossRank < 0 ||
      crossRank >= crossSize) {
    throw InvalidArgument("invalid topology: local rank " + std::to_string(localRank) + " of " +
                          std::to_string(localSize) + ", cross rank " + std::to_string(crossRank) +
                          " of " + std::to_string(crossSize));
  }
  RuntimeOptions options;
  options.topology = Topology{rank, size, localRank, localSize, crossRank, crossSize};
  options.transport = transport;
  options.controller = controller;
  options.storeHost = storeHost;
  options.storePort = storePort;
  options.storeOwner = storeServedByRank0 || serveStore ? StoreOwner::Rank0 : StoreOwner::Launcher;
  options.secret = secret;
  options.listenHost = listenHost;
  options.mpiComm = mpiComm;
  options.processSets = processSets;
  options.settings = Settings::fromEnvironment();
  if (startTimeoutSeconds > 0) options.settings.startTimeoutSeconds = startTimeoutSeconds;

  py::gil_scoped_release release;
  std::lock_guard<std::mutex> lifecycle(state().lifecycleMu);
  if (auto existing = current()) {
    if (existing->running()) return;  // already initialized: a no-op, as in Horovod
    existing->shutdown();             // a runtime that died (peer failure) is replaced
    setCurrent(nullptr);
  }
  if (serveStore) {
    serveRendezvous(storeHost, storePort, secret,
                    Clock::now() + secondsToMillis(options.settings.startTimeoutSeconds));
  }
  // Every rank of an elastic job passes the driver's generation: the processes' own counts of
  // inits differ (survivors have more than new workers).
  int own = state().generations[storeHost + ":" + std::to_string(storePort) + "/" + secret]++;
  options.generation = generation >= 0 ? generation : own;
  std::shared_ptr<Runtime> rt = Runtime::start(options);
  setCurrent(std::move(rt));
}

void shutdown() {
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lifecycle(state().lifecycleMu);
    std::shared_ptr<Runtime> rt;
    {
      std::lock_guard<std::mutex> lock(state().mu);
      rt.swap(state().runtime);
    }
    if (rt) rt->shutdown();
  }
  sweepDeferredReleases();
}

py::dict topology() {
  auto rt = requireRuntime();
  const Topology& t = rt->topology();
  py::dict d;
  d["rank"] = t.rank;
  d["size"] = t.size;
  d["local_rank"] = t.localRank;
  d["local_size"] = t.localSize;
  d["cross_rank"] = t.crossRank;
  d["cross_size"] = t.crossSize;
  return d;
}

// Process-set changes wait for every rank's matching call, bounded by HORA_TIMEOUT_SECONDS and
// interruptible by signals. The change stays submitted after a timeout: should the other ranks
// make the call later, every rank still applies it, so the sets stay the same everywhere. The
// bound is an error path, not a way on, so the wait counts as blocked: ranks that meanwhile
// wait in a collective this rank never submits end as a deadlock, not at the timeout.
void waitForProcessSetChange(const std::shared_ptr<Runtime>& rt, const Handle& handle,
                             const char* call) {
  double timeout = rt->settings().timeoutSeconds;
  std::optional<double> bound;
  if (timeout > 0) bound = timeout;
  BlockedScope blocked(rt.get(), /*driven=*/false);
  if (!waitInterruptibly(handle, bound)) {
    throw TimeoutError(std::string(call) + " did not complete within HORA_TIMEOUT_SECONDS (" +
                       std::to_string(static_cast<int64_t>(timeout)) + " s) on rank " +
                       std::to_string(rt->topology().rank) +
                       ": every rank must make the same call. A later matching call on the "
                       "other ranks still applies the change here.");
  }
  handle.rethrowIfFailed();
}

int addProcessSet(const std::vector<int>& ranks, const std::string& callSite) {
  auto rt = requireRuntime();
  std::shared_ptr<Handle> handle;
  {
    py::gil_scoped_release release;
    handle = rt->addProcessSet(ranks, callSite);
  }
  waitForProcessSetChange(rt, *handle, "add_process_set");
  return handle->processSetId;
}

void removeProcessSet(int id, const std::string& callSite) {
  auto rt = requireRuntime();
  std::shared_ptr<Handle> handle;
  {
    py::gil_scoped_release release;
    handle = rt->removeProcessSet(id, callSite);
  }
  waitForProcessSetChange(rt, *handle, "remove_process_set");
}

// MPI: initialise MPI if needed and describe the communicator the engine would run on.
py::dict mpiCommInfo(int64_t commF, const std::vector<int>& worldRanks) {
  MpiCommInfo info;
  {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lifecycle(state().lifecycleMu);
    info = hora::mpiCommInfo(commF, worldRanks,
                             secondsToMillis(Settings::fromEnvironment().startTimeoutSeconds));
  }
  py::dict d;
  d["comm"] = info.commF;
  d["rank"] = info.rank;
  d["size"] = info.size;
  d["local_rank"] = info.localRank;
  d["local_size"] = info.localSize;
  d["cross_rank"] = info.crossRank;
  d["cross_size"] = info.crossSize;
  return d;
}

py::list envVars() {
  py::list out;
  for (const EnvVarInfo& v : allEnvVars()) {
    out.append(py::make_tuple(v.name, v.defaultValue, v.description));
  }
  return out;
}

std::optional<std::string> lookupEnvVar(const std::string& name) {
  bool declared = false;
  for (const EnvVarInfo& v : allEnvVars()) declared = declared || name == v.name;
  if (!declared) {
    throw InvalidArgument("'" + name + "' is not a declared Hora environment variable " +
                          "(see core/common/settings.cc)");
  }
  std::string value;
  if (!lookupEnv(name, &value)) return std::nullopt;
  return value;
}

// init, shutdown, and what a running engine is: its topology, process sets and transport.
void registerLifecycle(py::module_& m) {
  m.def("init", &init, py::arg("rank"), py::arg("size"), py::arg("local_rank"),
        py::arg("local_size"), py::arg("cross_rank"), py::arg("cross_size"),
        py::arg("transport") = "tcp", py::arg("controller") = "", py::arg("store_host") = "",
        py::arg("store_port") = 0, py::arg("serve_store") = false, py::arg("secret") = "",
        py::arg("listen_host") = "", py::arg("process_sets") = std::vector<std::vector<int>>{},
        py::arg("mpi_comm") = -1, py::arg("generation") = -1, py::arg("start_timeout") = -1.0,
        py::arg("store_served_by_rank0") = false,
        "Start the engine (collective: blocks until every rank connected; GIL released). "
        "transport runs the collectives, controller the negotiation (\"\" = transport). "
        "Without a store, TCP beside MPI bootstraps one over MPI. "
        "Settings come from HORA_*/HOROVOD_* variables. A no-op when already running. "
        "generation >= 0 names this init's store keys (the same on every rank; default: this "
        "process's count of inits); start_timeout > 0 overrides HORA_START_TIMEOUT (seconds); "
        "store_served_by_rank0: rank 0 serves the store, not a launcher (said when it fails).");
  m.def("shutdown", &shutdown, "Stop the engine; pending operations fail. Idempotent.");
  m.def(
      "is_initialized", [] { return current() != nullptr; }, "True between init() and shutdown().");
  m.def(
      "topology", &topology,
      "dict(rank, size, local_rank, local_size, cross_rank, cross_size); ValueError before init.");
  m.def("add_process_set", &addProcessSet, py::arg("ranks"), py::arg("call_site") = "",
        "Collective over all ranks: register a process set, return its id.");
  m.def("remove_process_set", &removeProcessSet, py::arg("id"), py::arg("call_site") = "",
        "Collective over all ranks: remove a process set.");
  m.def(
      "process_set_ranks", [](int id) { return requireRuntime()->processSetRanks(id); },
      py::arg("id"), "Global ranks of a process set.");
  m.def(
      "process_set_ids", [] { return requireRuntime()->processSetIds(); },
      "Ids of the registered process sets (0 is the world).");
  m.def(
      "transport_name", [] { return requireRuntime()->transportName(); },
      "Transport of the running engine: \"tcp\" or \"mpi\", or \"<controller>+<data>\" "
      "when negotiation and collectives run on different ones (\"mpi+tcp\", \"tcp+mpi\").");
}

// What a running engine shows of its work: the timeline and its counters.
void registerObservation(py::module_& m) {
  m.def(
      "start_timeline",
      [](const std::string& path, bool markCycles) {
        auto rt = requireRuntime();
        py::gil_scoped_release release;
        rt->startTimeline(path, markCycles);
      },
      py::arg("path"), py::arg("mark_cycles") = false,
      "Start writing the timeline to path (world rank 0 writes; a no-op elsewhere).");
  m.def(
      "stop_timeline",
      [] {
        auto rt = requireRuntime();
        py::gil_scoped_release release;
        rt->stopTimeline();
      },
      "Stop writing the timeline; the file stays valid JSON.");
  m.def(
      "engine_counters",
      [] {
        EngineCounters c = requireRuntime()->counters();
        py::dict d;
        d["control_messages_sent"] = c.controlMessagesSent;
        d["loop_wakeups"] = c.loopWakeups;
        d["wait_end_reports"] = c.waitEndReports;
        d["caller_ops"] = c.callerOps;
        d["folded_ops"] = c.foldedOps;
        d["agreed_rounds"] = c.agreedRounds;
        d["loop_cycles"] = c.loopCycles;
        return d;
      },
      "Totals since init on this rank, for tests and benchmarks: control_messages_sent "
      "(negotiation messages to other ranks), loop_wakeups (wake-ups of the background thread "
      "asked by frontend threads, each ask counted even when one was still pending), "
      "wait_end_reports (a worker telling rank 0 on their own that "
      "it is no longer blocked in a wait), caller_ops (collectives a waiting frontend thread ran "
      "itself, HORA_CALLER_DRIVES), folded_ops (small allreduces run from the data every rank "
      "published with its agreement round, without a second exchange), agreed_rounds (rounds of "
      "local agreement run: each the collectives every rank held at once, run together), "
      "loop_cycles (cycles the background thread ran).");
}

// What this build and machine offer (transports, the GPU path, the host's identity) and the
// settings it reads; none needs a running engine.
void registerBuildInfo(py::module_& m) {
  m.def("mpi_comm_info", &mpiCommInfo, py::arg("comm") = -1, py::arg("ranks") = std::vector<int>{},
        "MPI: initialise MPI if needed; dict(comm, rank, size, local_rank, local_size, "
        "cross_rank, cross_size) of the communicator with Fortran handle comm (-1: "
        "MPI_COMM_WORLD), or of the MPI_COMM_WORLD ranks listed. Collective over it.");
  m.def("mpi_threads_supported", &mpiThreadMultiple,
        "MPI: True when MPI runs at MPI_THREAD_MULTIPLE (initialises MPI if needed).");
  m.def(
      "mpi_built", [] { return transportBuilt("mpi"); }, "True when the MPI transport was built.");
  m.def(
      "nccl_built",
      [] {
        const gpu::GpuLibrary& lib = gpu::gpuLibrary();
        return lib.available() ? lib.ncclVersion() : 0;
      },
      "NCCL version code when GPU tensors can go through NCCL in this process (NCCL and the CUDA "
      "runtime load and a device is present); 0 otherwise. Loads the libraries on first call.");
  m.def(
      "gpu_info",
      [] {
        const gpu::GpuLibrary& lib = gpu::gpuLibrary();
        py::dict d;
        d["available"] = lib.available();
        d["reason"] = lib.reason();
        d["nccl_loaded"] = lib.ncclLoaded();
        d["nccl_version"] = lib.ncclVersion();
        d["nccl_library"] = lib.ncclPath();
        d["cuda_library"] = lib.cudaPath();
        d["devices"] = lib.deviceCount();
        return d;
      },
      "What the GPU path found: available, reason (why not), nccl_loaded, nccl_version, "
      "nccl_library, cuda_library, devices.");
  m.def(
      "tcp_built", [] { return true; }, "The TCP transport is always built.");
  m.def(
      "host_identity", [] { return hostIdentity(); },
      "This machine and network namespace (boot id, host name, namespace): processes with equal "
      "identities share shared memory and the loopback interface.");
  m.def("env_vars", &envVars, "(name, default, description) of every HORA_* variable.");
  m.def("lookup_env", &lookupEnvVar, py::arg("name"),
        "Value of HORA_<name>, else HOROVOD_<name>, else None.");
  m.attr("version") = HORA_VERSION;
  m.attr("__version__") = HORA_VERSION;
}

}  // namespace

void registerRuntime(py::module_& m) {
  registerLifecycle(m);
  registerObservation(m);
  registerBuildInfo(m);
}

}  // namespace hora::bindings
