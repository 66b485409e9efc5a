#include "core/common/settings.h"

#include <strings.h>
#include <cstdlib>
#include <iterator>

#include "core/common/errors.h"

namespace hora {

namespace {

// Every variable Hora reads, declared once. Constant-initialized (plain pointers), so a lookup
// from another file's static initializer finds it filled in.
constexpr EnvVarInfo kEnvVars[] = {
    // Engine tuning.
    {"CYCLE_TIME", "1", "ms (float) the background loop waits to batch newly enqueued tensors"},
    {"FUSION_THRESHOLD", "134217728", "bytes of one fused buffer; 0 disables fusion"},
    {"CACHE_CAPACITY", "1024", "response cache entries; 0 disables the cache"},
    {"SPIN_MICROSECONDS", "50",
     "us a waiting thread polls, yielding its core, before it sleeps; 0 = sleep at once"},
    {"SPIN_ADAPTIVE", "1",
     "1: with more local ranks than CPUs, a caller whose last waits outlasted the poll sleeps "
     "at once (polling every 8th wait)"},
    {"CALLER_DRIVES", "auto",
     "1: a thread waiting for a cached collective on one host (or in a job of one rank) runs "
     "it itself while it polls, instead of handing it to the background thread; 0 never; auto: "
     "when the host runs at most two ranks per CPU online"},
    {"AGREEMENT_PAYLOADS", "auto",
     "1: on one host, a rank publishes a small cached allreduce's data with its agreement round, "
     "and the ranks fold it from there without exchanging it again; 0 never; auto: when the host "
     "runs at most two ranks per CPU online"},
    {"TIMEOUT_SECONDS", "60", "a peer silent this long inside a collective fails pending work"},
    {"START_TIMEOUT", "30", "seconds to wait for every rank at rendezvous"},
    {"LOG_LEVEL", "warning", "trace, debug, info, warning, error or fatal"},
    {"LOG_HIDE_TIME", "0", "1 drops timestamps from log lines"},
    // Observability.
    {"TIMELINE", "", "path of a Chrome-trace timeline written by rank 0, or DYNAMIC"},
    {"TIMELINE_MARK_CYCLES", "0", "1 marks every background-loop cycle in the timeline"},
    {"TIMELINE_MAX_MB", "1024", "size cap of the timeline file; recording stops there (0 = none)"},
    {"TIMELINE_SAMPLE_EVERY", "1", "record only every Nth training step in the timeline"},
    {"STALL_CHECK_DISABLE", "0", "1 turns the stall inspector off"},
    {"STALL_CHECK_TIME_SECONDS", "60", "seconds before rank 0 reports ranks missing a tensor"},
    {"STALL_SHUTDOWN_TIME_SECONDS", "0", "seconds before a stall shuts the job down; 0 = never"},
    {"AUTOTUNE", "0", "1 tunes fusion threshold and cycle time online (rank 0 decides)"},
    {"AUTOTUNE_LOG", "", "CSV file where autotune records each candidate and its score"},
    {"AUTOTUNE_WARMUP_SAMPLES", "3", "autotune samples discarded before scoring"},
    {"AUTOTUNE_STEPS_PER_SAMPLE", "10", "training steps in one autotune sample"},
    {"AUTOTUNE_SAMPLES_PER_CANDIDATE", "3", "samples whose median scores one candidate"},
    {"DYNAMIC_PROCESS_SETS", "0", "1 allows add_process_set/remove_process_set after init"},
    {"FAULT_INJECT", "",
     "tests only: close_after_bytes=N[,rank=R] cuts a connection after N bytes sent"},
    // Topology, set by horarun (or derived from torchrun / Slurm variables).
    {"RANK", "", "this process's rank"},
    {"SIZE", "", "number of ranks"},
    {"LOCAL_RANK", "", "rank among the processes on this host"},
    {"LOCAL_SIZE", "", "number of processes on this host"},
    {"CROSS_RANK", "", "index of this host among hosts with this local rank"},
    {"CROSS_SIZE", "", "number of hosts with this local rank"},
    {"HOSTNAME", "", "name of this host as the launcher knows it"},
    {"RENDEZVOUS_ADDR", "", "address of the rendezvous store (served by horarun, or by rank 0)"},
    {"RENDEZVOUS_PORT", "", "port of the rendezvous store"},
    {"SECRET", "", "job secret every connection proves it knows (set by horarun)"},
    {"SECRET_FILE", "", "file holding the job secret (read when HORA_SECRET is unset)"},
    {"SECRET_THROUGH_STORE", "0",
     "1: in a job another program started with a store for its ranks (torch.distributed's, "
     "under Lightning, Ray Train, DeepSpeed, ...) and no secret set, rank 0 makes a random one "
     "and hands it out through that store (as safe as the store)"},
    {"INSECURE", "0",
     "1 lets a job without a secret listen on a non-loopback address (trusted networks only)"},
    {"IFACE", "", "network interface whose address ranks listen on (and only there)"},
    {"CONTROLLER", "", "transport for negotiation: tcp (alias gloo) or mpi"},
    {"TCP_EAGER_MESH", "0",
     "1 connects every pair of ranks over TCP at start (default: each link on first use)"},
    {"SHM_DISABLE", "0",
     "1 keeps collectives on TCP when every rank runs on one host (default: shared memory)"},
    {"SHM_RING_BYTES", "524288",
     "bytes of each rank-pair ring in the shared segment (ranks x (ranks-1) of them)"},
    {"SHM_WINDOW_BYTES", "524288",
     "bytes of each rank's window in the shared segment, where allreduces over the whole job "
     "are reduced in place by the ranks together (0: none, every allreduce goes through the "
     "rings)"},
    {"SHM_ARENA_BYTES", "1073741824",
     "bytes of each rank's arena in the shared segment (virtual until used), where "
     "DistributedOptimizer places gradients that the other ranks read in place (0: none)"},
    {"SHARED_GRADIENTS", "1",
     "0 keeps tensors out of the shared arena; by default, where it exists, torch "
     "DistributedOptimizer's gradients that stay from one step to the next move into it, and "
     "TensorFlow's private copies are made there"},
    {"SHM_HOST_BY_NAME", "0",
     "tests only: 1 adds HORA_HOSTNAME to the host identity shared memory uses, so ranks "
     "horarun places on two names of one machine share memory only with their own host"},
    {"HIERARCHICAL_ALLREDUCE", "",
     "1 runs allreduces of the global set (CPU and GPU tensors) within each host, then across "
     "hosts, then within each host again (jobs over several hosts with equal ranks per host); "
     "0 never; unset (or auto) does so for CPU tensors when each host runs two ranks or more"},
    {"HIERARCHICAL_ALLGATHER", "0",
     "1 runs CPU allgathers of the global set within each host, then across hosts, then within "
     "each host again (jobs over several hosts with equal ranks per host); auto as for "
     "HIERARCHICAL_ALLREDUCE"},
    {"CONTROL_FANOUT", "32",
     "children per rank of the TCP control plane's tree: rank 0 holds at most this many control "
     "connections and the others relay; up to this many + 1 ranks it is a star around rank 0 "
     "(the same value on every rank)"},
    {"SHM_CONTROL", "1",
     "0 keeps negotiation with rank 0 on TCP when collectives run over shared memory"},
    {"SHM_LOCAL_AGREEMENT", "1",
     "0 sends every tensor to rank 0 for negotiation, cached ones included; by default, when "
     "negotiation runs over shared memory (or the job has one rank), the ranks agree on cached "
     "tensors of the global process set among themselves (off on every rank when any rank sets "
     "0 or autotune is on)"},
    {"CPU_OPERATIONS", "", "transport for CPU tensors: tcp (alias gloo) or mpi"},
    // Elastic mode, set by horarun --min-np/--host-discovery-script for each worker.
    {"ELASTIC", "0", "1: this process is an elastic worker; init() asks the driver for its rank"},
    {"ELASTIC_WORKER_ID", "", "the elastic driver's name for this worker process"},
    {"ELASTIC_PORT", "", "port of the elastic driver's control store (on RENDEZVOUS_ADDR)"},
    {"ELASTIC_TIMEOUT", "600", "seconds a worker waits for the driver to form a new generation"},
    // Cluster engines (frameworks/hora/spark/).
    {"SPARK_START_TIMEOUT", "600",
     "seconds hora.spark.run waits for the Spark cluster to offer a task slot per rank"},
    // GPU tensors (core/transport/nccl/).
    {"NCCL_LIBRARY", "",
     "path of libnccl.so.2 to load; default: the copy already loaded, else the loader's search"},
    {"CUDA_LIBRARY", "",
     "path of the CUDA runtime (libcudart) to load; default: as HORA_NCCL_LIBRARY"},
};

}  // namespace

const std::vector<EnvVarInfo>& allEnvVars() {
  static const std::vector<EnvVarInfo> kVars(std::begin(kEnvVars), std::end(kEnvVars));
  return kVars;
}

namespace {

const EnvVarInfo* find(const std::string& name) {
  for (const auto& v : allEnvVars()) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

}  // namespace

bool lookupEnv(const std::string& name, std::string* value) {
  HORA_CHECK(find(name) != nullptr, "environment variable " + name + " is not declared");
  for (const char* prefix : {"HORA_", "HOROVOD_"}) {
    const char* v = std::getenv((prefix + name).c_str());
    if (v != nullptr && *v != '\0') {
      *value = v;
      return true;
    }
  }
  return false;
}

bool envIsSet(const std::string& name) {
  std::string v;
  return lookupEnv(name, &v);
}

std::string envString(const std::string& name) {
  std::string v;
  if (lookupEnv(name, &v)) return v;
  return find(name)->defaultValue;
}

double envDouble(const std::string& name) {
  std::string v = envString(name);
  if (v.empty()) return 0.0;
  char* end = nullptr;
  double d = std::strtod(v.c_str(), &end);
  if (end == v.c_str()) throw InvalidArgument("HORA_" + name + "=" + v + " is not a number");
  return d;
}

int64_t envInt(const std::string& name) {
  std::string v = envString(name);
  if (v.empty()) return 0;
  char* end = nullptr;
  long long i = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str()) throw InvalidArgument("HORA_" + name + "=" + v + " is not an integer");
  return i;
}

bool envBool(const std::string& name) {
  std::string v = envString(name);
  if (strcasecmp(v.c_str(), "true") == 0 || strcasecmp(v.c_str(), "yes") == 0) return true;
  return std::strtol(v.c_str(), nullptr, 10) > 0;
}

Preference envPreference(const std::string& name) {
  std::string v = envString(name);
  if (v.empty() || strcasecmp(v.c_str(), "auto") == 0) return Preference::Auto;
  return envBool(name) ? Preference::On : Preference::Off;
}

Settings Settings::fromEnvironment() {
  Settings s;
  s.cycleTimeMs = envDouble("CYCLE_TIME");
  s.fusionThreshold = envInt("FUSION_THRESHOLD");
  s.cacheCapacity = envInt("CACHE_CAPACITY");
  s.spinMicroseconds = envInt("SPIN_MICROSECONDS");
  s.spinAdaptive = envBool("SPIN_ADAPTIVE");
  s.callerDrives = envPreference("CALLER_DRIVES");
  s.agreementPayloads = envPreference("AGREEMENT_PAYLOADS");
  s.timeoutSeconds = envDouble("TIMEOUT_SECONDS");
  s.shmDisable = envBool("SHM_DISABLE");
  s.shmRingBytes = envInt("SHM_RING_BYTES");
  s.shmWindowBytes = envInt("SHM_WINDOW_BYTES");
  s.shmArenaBytes = envInt("SHM_ARENA_BYTES");
  s.shmHostByName = envBool("SHM_HOST_BY_NAME");
  s.hierarchicalAllreduce = envPreference("HIERARCHICAL_ALLREDUCE");
  s.hierarchicalAllgather = envPreference("HIERARCHICAL_ALLGATHER");
  s.shmControl = envBool("SHM_CONTROL");
  s.controlFanout = envInt("CONTROL_FANOUT");
  s.shmLocalAgreement = envBool("SHM_LOCAL_AGREEMENT");
  s.startTimeoutSeconds = envDouble("START_TIMEOUT");
  s.logLevel = envString("LOG_LEVEL");
  s.logHideTime = envBool("LOG_HIDE_TIME");
  s.timeline = envString("TIMELINE");
  s.timelineMarkCycles = envBool("TIMELINE_MARK_CYCLES");
  s.timelineMaxMb = envInt("TIMELINE_MAX_MB");
  s.timelineSampleEvery = envInt("TIMELINE_SAMPLE_EVERY");
  s.stallCheckDisable = envBool("STALL_CHECK_DISABLE");
  s.stallCheckTimeSeconds = envDouble("STALL_CHECK_TIME_SECONDS");
  s.stallShutdownTimeSeconds = envDouble("STALL_SHUTDOWN_TIME_SECONDS");
  s.dynamicProcessSets = envBool("DYNAMIC_PROCESS_SETS");
  s.autotune = envBool("AUTOTUNE");
  s.autotuneLog = envString("AUTOTUNE_LOG");
  s.autotuneWarmupSamples = envInt("AUTOTUNE_WARMUP_SAMPLES");
  s.autotuneStepsPerSample = envInt("AUTOTUNE_STEPS_PER_SAMPLE");
  s.autotuneSamplesPerCandidate = envInt("AUTOTUNE_SAMPLES_PER_CANDIDATE");
  s.fusionThresholdSet = envIsSet("FUSION_THRESHOLD");
  s.cycleTimeSet = envIsSet("CYCLE_TIME");
  if (s.cycleTimeMs < 0) throw InvalidArgument("HORA_CYCLE_TIME must be >= 0");
  if (s.fusionThreshold < 0) throw InvalidArgument("HORA_FUSION_THRESHOLD must be >= 0");
  if (s.cacheCapacity < 0) throw InvalidArgument("HORA_CACHE_CAPACITY must be >= 0");
  if (s.spinMicroseconds < 0) throw InvalidArgument("HORA_SPIN_MICROSECONDS must be >= 0");
  if (s.timeoutSeconds <= 0) throw InvalidArgument("HORA_TIMEOUT_SECONDS must be > 0");
  if (s.controlFanout < 1 || s.controlFanout > (1 << 20)) {
    throw InvalidArgument("HORA_CONTROL_FANOUT must be from 1 to 1048576");
  }
  if (s.shmRingBytes < 4096 || s.shmRingBytes > (1ll << 30) || s.shmRingBytes % 64 != 0) {
    throw InvalidArgument("HORA_SHM_RING_BYTES must be a multiple of 64 from 4096 to 1 GiB");
  }
  if (s.shmWindowBytes < 0 || s.shmWindowBytes > (1ll << 30) || s.shmWindowBytes % 128 != 0) {
    throw InvalidArgument("HORA_SHM_WINDOW_BYTES must be a multiple of 128 from 0 to 1 GiB");
  }
  if (s.shmArenaBytes < 0 || s.shmArenaBytes > (1ll << 36) || s.shmArenaBytes % 4096 != 0) {
    throw InvalidArgument("HORA_SHM_ARENA_BYTES must be a multiple of 4096 from 0 to 64 GiB");
  }
  return s;
}

}  // namespace hora
