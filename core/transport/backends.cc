#include "core/transport/backends.h"

#include "core/common/errors.h"
#include "core/config.h"
#if HORA_HAVE_MPI
#include "core/transport/mpi/mpi_bootstrap.h"
#include "core/transport/mpi/mpi_context.h"
#endif

namespace hora {
#if !HORA_HAVE_MPI
namespace {

[[noreturn]] void noMpi() {
  throw NotSupported(
      "this build of Hora has no MPI transport (MPI was not found when it was built)");
}

}  // namespace
#endif

bool transportBuilt(const std::string& name) {
  // The CPU transports are always compiled in; MPI only when CMake found it (core/config.h).
  if (name == "tcp" || name == "gloo" || name == "shm") return true;
  if (name == "mpi") return HORA_HAVE_MPI != 0;
  return false;
}

BootstrappedStore bootstrapStoreOverMpi(const ConnectOptions& options) {
#if HORA_HAVE_MPI
  return mpi::bootstrapStore(options);
#else
  (void)options;
  noMpi();
#endif
}

MpiCommInfo mpiCommInfo(int64_t commF, const std::vector<int>& worldRanks, Millis startTimeout) {
#if HORA_HAVE_MPI
  return mpi::describeMpiComm(commF, worldRanks, startTimeout);
#else
  (void)commF;
  (void)worldRanks;
  (void)startTimeout;
  noMpi();
#endif
}

bool mpiThreadMultiple() {
#if HORA_HAVE_MPI
  return mpi::MpiContext::acquire().threadLevel() == MPI_THREAD_MULTIPLE;
#else
  noMpi();
#endif
}

}  // namespace hora
