#include "core/transport/mpi/mpi_context.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>

#include "core/common/errors.h"
#include "core/common/settings.h"
#include "core/transport/mpi/mpi_datatypes.h"
#include "core/transport/mpi/mpi_wait.h"
#include "core/transport/rendezvous_store.h"

namespace hora {
namespace mpi {
namespace {

// Why a start-up wait under mpirun passed HORA_START_TIMEOUT.
const std::string kNotEveryRankStarted = "not every rank of the MPI job called hora.init()";

std::mutex& contextMutex() {
  // Leaked on purpose, like gContext: the exit handler locks it after static destructors may have
  // run.
  static auto* mu = new std::mutex();
  return *mu;
}

// Never destroyed: the exit handler may run after static destructors.
MpiContext* gContext = nullptr;
bool gReady = false;
std::atomic<int> gLeases{0};

extern "C" void finalizeMpiAtExit() {
  if (gContext != nullptr) gContext->finalizeAtExit();
}

// Some MPI builds open plugins that expect libmpi's symbols to be global. The engine is loaded
// by Python with RTLD_LOCAL, so promote the already loaded libmpi to RTLD_GLOBAL first.
void promoteMpiSymbols() {
  Dl_info info;
  auto* symbol = reinterpret_cast<void*>(&MPI_Init_thread);
  if (dladdr(symbol, &info) == 0 || info.dli_fname == nullptr) return;
  void* handle = dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  (void)handle;  // kept open for the life of the process on purpose
}

}  // namespace

int groupTag(const std::vector<int>& ranks) {
  uint32_t h = 2166136261u;
  for (int r : ranks) {
    h ^= static_cast<uint32_t>(r);
    h *= 16777619u;
  }
  // Every member computes the same tag from the same list, which MPI_Comm_create_group requires;
  // different lists get different tags so concurrent creations do not match each other's messages.
  return static_cast<int>(h & 0x7fff);  // MPI guarantees tags up to at least 32767
}

// A counter, not a lock: the exit handler only needs to know whether any MPI handle is still held.
MpiContext::Lease::Lease() { gLeases.fetch_add(1); }
MpiContext::Lease::~Lease() { gLeases.fetch_sub(1); }

MpiContext::MpiContext() {
  for (auto& row : ops_) {
    for (auto& op : row) op = MPI_OP_NULL;
  }
}

std::string mpiErrorText(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) {
    return "MPI error code " + std::to_string(code);
  }
  return std::string(text, static_cast<size_t>(std::max(length, 0)));
}

void checkMpi(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS) throw IoError(what + ": " + mpiErrorText(rc));
}

MPI_Comm commFromHandle(int64_t handle, const std::string& what) {
  if (handle < std::numeric_limits<MPI_Fint>::min() ||
      handle > std::numeric_limits<MPI_Fint>::max()) {
    throw InvalidArgument("mpi: " + what + ": " + std::to_string(handle) +
                          " is not an MPI communicator handle");
  }
  MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(handle));
  if (comm == MPI_COMM_NULL) {
    throw InvalidArgument("mpi: " + what +
                          " is MPI_COMM_NULL (this process is not a member of it)");
  }
  return comm;
}

const char* threadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown MPI thread level";
  }
}

MpiContext& MpiContext::acquire() {
  std::lock_guard<std::mutex> lock(contextMutex());
  if (gContext == nullptr) gContext = new MpiContext();
  if (!gReady) {
    gContext->initialise();
    gReady = true;
  }
  return *gContext;
}

void MpiContext::initialise() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  // MPI cannot be initialised after MPI_Finalize, so this is an error the user must fix, not one to
  // retry.
  if (finalized) {
    throw NotSupported(
        "mpi: MPI was already finalised in this process and cannot be initialised again; keep "
        "MPI initialised while Hora uses it (or use HORA_CONTROLLER=tcp)");
  }
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Before MPI_Init_thread, which is when MPI opens its plugins.
    promoteMpiSymbols();
    // MPI can be initialised before any ConnectOptions exist, so the start timeout comes straight
    // from the environment here.
    Millis bound = secondsToMillis(Settings::fromEnvironment().startTimeoutSeconds);
    ExitWatchdog watchdog(bound, "mpi: MPI_Init_thread did not return within HORA_START_TIMEOUT (" +
                                     std::to_string(bound.count() / 1000) +
                                     " s): " + kNotEveryRankStarted + ", so this process exits");
    checkMpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided),
             "mpi: MPI_Init_thread");
    initialisedByHora_ = true;
    // Registered only when Hora initialised MPI: whoever initialised it otherwise finalises it.
    std::atexit(&finalizeMpiAtExit);
  } else {
    // Someone else initialised MPI: Hora cannot choose the thread level, only check it below.
    checkMpi(MPI_Query_thread(&provided), "mpi: MPI_Query_thread");
  }
  threadLevel_ = provided;
  if (provided < MPI_THREAD_SERIALIZED) {
    throw NotSupported(std::string("mpi: MPI runs at ") + threadLevelName(provided) +
                       ", but Hora calls MPI from its background thread, which needs at least "
                       "MPI_THREAD_SERIALIZED (MPI_THREAD_MULTIPLE to use MPI alongside Hora). "
                       "If mpi4py initialises MPI, leave mpi4py.rc.thread_level at 'multiple'.");
  }
  checkMpi(MPI_Comm_rank(MPI_COMM_WORLD, &worldRank_), "mpi: MPI_Comm_rank");
  checkMpi(MPI_Comm_size(MPI_COMM_WORLD, &worldSize_), "mpi: MPI_Comm_size");
  // The user-defined ops can be made only once MPI is up, and are made once per process.
  createOwnOps(ops_);
}

MPI_Op MpiContext::ownOp(DataType dtype, ReduceOp op) const {
  int d = ownReductionIndex(dtype);
  int i = elementwiseOpIndex(op);
  HORA_CHECK(d >= 0 && i >= 0, std::string("no user-defined MPI op for ") + dtypeName(dtype) + " " +
                                   reduceOpName(op));
  return ops_[d][i];
}

MPI_Comm MpiContext::worldSubset(const std::vector<int>& worldRanks, Millis startTimeout) {
  std::lock_guard<std::mutex> lock(contextMutex());
  std::string listed = rankList(worldRanks);
  std::vector<int> sorted = worldRanks;
  std::sort(sorted.begin(), sorted.end());
  bool valid = !sorted.empty() && sorted.front() >= 0 && sorted.back() < worldSize_ &&
               std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  if (!valid) {
    throw InvalidArgument("mpi: comm=[" + listed +
                          "] must list distinct MPI_COMM_WORLD ranks in [0, " +
                          std::to_string(worldSize_) + ")");
  }
  // Only members of the group may call MPI_Comm_create_group, so a process outside the list is
  // refused before it.
  if (std::find(worldRanks.begin(), worldRanks.end(), worldRank_) == worldRanks.end()) {
    throw InvalidArgument("mpi: this process (MPI_COMM_WORLD rank " + std::to_string(worldRank_) +
                          ") is not in comm=[" + listed +
                          "]; only the listed ranks call hora.init(comm=...)");
  }
  // A list seen before (hora.init() again after hora.shutdown()) gets the communicator made then,
  // without another collective call.
  auto found = subsets_.find(worldRanks);
  if (found != subsets_.end()) return found->second;
  MPI_Group world = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  checkMpi(MPI_Comm_group(MPI_COMM_WORLD, &world), "mpi: MPI_Comm_group");
  int rc = MPI_Group_incl(world, static_cast<int>(worldRanks.size()), worldRanks.data(), &group);
  MPI_Group_free(&world);
  checkMpi(rc, "mpi: MPI_Group_incl");
  MPI_Comm comm = MPI_COMM_NULL;
  {
    // Collective over the listed ranks, with no non-blocking form: a listed rank that never
    // comes (dead, hung, or given another list) would hold this one for ever.
    ExitWatchdog watchdog(startTimeout,
                          "mpi: MPI_Comm_create_group over comm=[" + listed +
                              "] did not return within HORA_START_TIMEOUT (" +
                              std::to_string(startTimeout.count() / 1000) +
                              " s): a listed rank did not call hora.init(comm=...) with the same "
                              "list (dead, hung, or on another path), so this process exits");
    rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, groupTag(worldRanks), &comm);
  }
  MPI_Group_free(&group);
  checkMpi(rc, "mpi: MPI_Comm_create_group over comm=[" + listed + "]");
  subsets_[worldRanks] = comm;
  return comm;
}

void MpiContext::retire(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL) return;
  std::lock_guard<std::mutex> lock(contextMutex());
  retired_.push_back(comm);
}

void MpiContext::finalizeAtExit() {
  std::lock_guard<std::mutex> lock(contextMutex());
  if (!initialisedByHora_) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  int alive = gLeases.load();
  if (alive > 0) {
    std::fprintf(stderr,
                 "hora: not finalising MPI at exit: %d MPI communicators of Hora are still open "
                 "(hora.shutdown() was not called); the MPI launcher may report this rank as "
                 "failed\n",
                 alive);
    return;
  }
  // Communicators and ops are freed before MPI_Finalize, which must be the last MPI call.
  for (auto& entry : subsets_) {
    if (entry.second != MPI_COMM_NULL) MPI_Comm_free(&entry.second);
  }
  subsets_.clear();
  for (auto& comm : retired_) MPI_Comm_free(&comm);
  retired_.clear();
  freeOwnOps(ops_);
  MPI_Finalize();
}

MpiCommInfo describeMpiComm(int64_t commF, const std::vector<int>& worldRanks,
                            Millis startTimeout) {
  MpiContext& context = MpiContext::acquire();
  MPI_Comm comm = MPI_COMM_WORLD;
  if (!worldRanks.empty()) {
    if (commF != kNoMpiComm)
      throw InvalidArgument("mpi: give either a communicator or a list of ranks, not both");
    comm = context.worldSubset(worldRanks, startTimeout);
  } else if (commF != kNoMpiComm) {
    // Communicators arrive from Python as Fortran handles, plain integers that need no MPI types in
    // the bindings.
    comm = commFromHandle(commF, "the communicator given to hora.init(comm=...)");
    int inter = 0;
    checkMpi(MPI_Comm_test_inter(comm, &inter),
             "mpi: the communicator given to hora.init(comm=...)");
    // An inter-communicator's rank and size describe only its local group, not one job.
    if (inter) throw InvalidArgument("mpi: hora.init(comm=...) needs an intra-communicator");
  }
  MpiCommInfo info;
  info.commF = MPI_Comm_c2f(comm);
  checkMpi(MPI_Comm_rank(comm, &info.rank), "mpi: MPI_Comm_rank");
  checkMpi(MPI_Comm_size(comm, &info.size), "mpi: MPI_Comm_size");
  // The splits below block without a bound; once every member passed this barrier, they do not
  // wait for anyone who has not come.
  MPI_Request arrived = MPI_REQUEST_NULL;
  checkMpi(MPI_Ibarrier(comm, &arrived), "mpi: MPI_Ibarrier");
  checkMpi(awaitOrAbort(&arrived, 1, nullptr, startTimeout, comm,
                        [&] {
                          return "rank " + std::to_string(info.rank) + " of " +
                                 std::to_string(info.size) +
                                 ": mpi: MPI_Ibarrier did not complete "
                                 "within HORA_START_TIMEOUT (" +
                                 std::to_string(startTimeout.count() / 1000) +
                                 " s): " + kNotEveryRankStarted +
                                 ". MPI cannot cancel a collective, so the MPI job is aborted.";
                        }),
           "mpi: MPI_Ibarrier");
  MPI_Comm local = MPI_COMM_NULL, cross = MPI_COMM_NULL;
  // Keyed by rank, so local ranks follow the communicator's order.
  checkMpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, info.rank, MPI_INFO_NULL, &local),
           "mpi: MPI_Comm_split_type");
  MPI_Comm_rank(local, &info.localRank);
  MPI_Comm_size(local, &info.localSize);
  // Only the local rank and size are kept; the split communicators themselves are not needed.
  MPI_Comm_free(&local);
  // Ranks with the same local rank form one cross communicator: one rank per host, in rank order.
  checkMpi(MPI_Comm_split(comm, info.localRank, info.rank, &cross), "mpi: MPI_Comm_split");
  MPI_Comm_rank(cross, &info.crossRank);
  MPI_Comm_size(cross, &info.crossSize);
  MPI_Comm_free(&cross);
  return info;
}

}  // namespace mpi
}  // namespace hora
