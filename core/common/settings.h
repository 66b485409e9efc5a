#pragma once
// Settings: every HORA_* environment variable the engine reads is declared once, in the table in
// settings.cc, with its default and a one-line description. Each variable is also accepted under
// its HOROVOD_* name (the HORA_ name wins when both are set), so existing job configs keep working.
// Settings are read once, at init; a later change of the environment needs shutdown() + init().
#include <cstdint>
#include <string>
#include <vector>

namespace hora {

struct EnvVarInfo {
  const char* name;          // without prefix, e.g. "FUSION_THRESHOLD"
  const char* defaultValue;  // as text; "" when unset means "not set"
  const char* description;
};

// The table, for documentation and `horarun --help-env`.
const std::vector<EnvVarInfo>& allEnvVars();

// Reads HORA_<name>, then HOROVOD_<name>. Returns false when neither is set (or the name is not in
// the table, which is a bug caught by HORA_CHECK).
bool lookupEnv(const std::string& name, std::string* value);
std::string envString(const std::string& name);  // falls back to the table default
double envDouble(const std::string& name);
int64_t envInt(const std::string& name);
bool envBool(const std::string& name);  // true when the integer value is > 0, or "true"/"yes"
bool envIsSet(const std::string& name);

// A choice the engine may also make by itself: 1/true/yes (On), 0 (Off), unset or "auto" (Auto).
enum class Preference { Off, On, Auto };
Preference envPreference(const std::string& name);

struct Settings {
  double cycleTimeMs = 1.0;               // CYCLE_TIME
  int64_t fusionThreshold = 128ll << 20;  // FUSION_THRESHOLD (bytes; 0 disables fusion)
  int64_t cacheCapacity = 1024;           // CACHE_CAPACITY (0 disables the response cache)
  int64_t spinMicroseconds = 50;          // SPIN_MICROSECONDS: polling before a wait sleeps
  bool spinAdaptive = true;               // SPIN_ADAPTIVE: stop polling while waits outlast it
  double timeoutSeconds = 60.0;           // TIMEOUT_SECONDS: a silent peer fails pending work
  double startTimeoutSeconds = 30.0;      // START_TIMEOUT: rendezvous and connection set-up
  bool shmDisable = false;                // SHM_DISABLE: collectives stay on TCP on one host
  int64_t shmRingBytes = 512 << 10;       // SHM_RING_BYTES: each rank-pair ring
  int64_t shmWindowBytes = 512 << 10;     // SHM_WINDOW_BYTES: each rank's window (0: none)
  int64_t shmArenaBytes = 1ll << 30;      // SHM_ARENA_BYTES: each rank's arena (0: none)
  bool shmHostByName = false;             // SHM_HOST_BY_NAME (testing aid, see setup.h)
  // HIERARCHICAL_ALLREDUCE, _ALLGATHER: steps within and across hosts (Auto: the engine decides)
  Preference hierarchicalAllreduce = Preference::Auto;
  Preference hierarchicalAllgather = Preference::Off;
  // CALLER_DRIVES: a waiting thread runs its cached collective itself (Auto: at most two ranks
  // per CPU online, callerDrivesByDefault)
  Preference callerDrives = Preference::Auto;
  // AGREEMENT_PAYLOADS: a small allreduce's data goes with its agreement round (Auto: the same
  // bound, payloadsByDefault)
  Preference agreementPayloads = Preference::Auto;
  bool shmControl = true;                   // SHM_CONTROL: negotiation over shared memory too
  int64_t controlFanout = 32;               // CONTROL_FANOUT: children per rank, TCP control tree
  bool shmLocalAgreement = true;            // SHM_LOCAL_AGREEMENT: cached tensors without rank 0
  std::string logLevel = "warning";         // LOG_LEVEL
  bool logHideTime = false;                 // LOG_HIDE_TIME
  std::string timeline;                     // TIMELINE (path or DYNAMIC)
  bool timelineMarkCycles = false;          // TIMELINE_MARK_CYCLES
  int64_t timelineMaxMb = 1024;             // TIMELINE_MAX_MB (0 = no cap)
  int64_t timelineSampleEvery = 1;          // TIMELINE_SAMPLE_EVERY (record every Nth step)
  bool stallCheckDisable = false;           // STALL_CHECK_DISABLE
  double stallCheckTimeSeconds = 60.0;      // STALL_CHECK_TIME_SECONDS
  double stallShutdownTimeSeconds = 0.0;    // STALL_SHUTDOWN_TIME_SECONDS (0 = never)
  bool dynamicProcessSets = false;          // DYNAMIC_PROCESS_SETS
  bool autotune = false;                    // AUTOTUNE
  std::string autotuneLog;                  // AUTOTUNE_LOG (CSV)
  int64_t autotuneWarmupSamples = 3;        // AUTOTUNE_WARMUP_SAMPLES
  int64_t autotuneStepsPerSample = 10;      // AUTOTUNE_STEPS_PER_SAMPLE
  int64_t autotuneSamplesPerCandidate = 3;  // AUTOTUNE_SAMPLES_PER_CANDIDATE
  bool fusionThresholdSet = false;          // set explicitly: autotune leaves it alone
  bool cycleTimeSet = false;
  // How long a cached tensor waits for the other ranks before it goes to rank 0 after all (no
  // environment variable: tests lengthen it to see that nothing else sends a message).
  int64_t agreementHandOverMs = 10;

  static Settings fromEnvironment();
};

}  // namespace hora
