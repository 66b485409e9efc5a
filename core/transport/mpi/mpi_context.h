#pragma once
// MpiContext: this process's hold on the MPI library. MPI itself is process-wide state (one
// MPI_Init per process, one MPI_Finalize), so this is the one place in the engine that keeps
// process-wide state, behind a mutex.
//
// Contract:
// - acquire() initialises MPI when nobody has yet (an application or mpi4py may have done it
//   before), requesting MPI_THREAD_MULTIPLE. Hora makes every MPI call of a running engine from
//   its one background thread, but MPI_Init, the communicator set-up of init() and MPI_Finalize
//   happen on the thread that called hora.init() (normally the main thread), so the level MPI
//   grants must be at least MPI_THREAD_SERIALIZED; a lower level makes acquire() throw
//   NotSupported. Only MPI_THREAD_MULTIPLE lets the application use MPI itself while Hora runs.
// - MPI is finalised only when Hora initialised it, and only at process exit (an atexit handler),
//   never at shutdown: MPI cannot be initialised twice in one process, and hora.init() after
//   hora.shutdown() must work. Whoever initialised MPI before Hora finalises it.
// - The user-defined reductions (float16 and bfloat16) live here, created once per process after
//   MPI is up and freed just before Hora's MPI_Finalize.
// - Objects that hold MPI handles (communicators, channels) take a Lease for their lifetime; the
//   exit handler skips MPI_Finalize with a warning when leases are still alive (a runtime that
//   was never shut down), since finalising under a running background thread would crash.
// - A rank that dies under MPI normally makes the MPI launcher abort the whole job (MPI's own
//   fault handling). Hora's communicators use MPI_ERRORS_RETURN, so an MPI error that is
//   reported instead becomes an IoError, but MPI collectives have no timeout: a peer that hangs
//   without dying hangs its partners too.
// Only MPI's C interface is used; skipping the deprecated C++ bindings keeps their warnings out.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/common/dtype.h"
#include "core/common/time.h"
#include "core/transport/backends.h"

namespace hora {
namespace mpi {

// How many dtypes Hora reduces with its own MPI_Ops (kOwnReductionTypes, mpi_datatypes.h).
constexpr int kOwnReductionTypeCount = 6;

class MpiContext {
 public:
  class Lease {
   public:
    Lease();
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
  };

  // Initialises MPI if needed (see the contract above) and returns the process's context.
  static MpiContext& acquire();

  int threadLevel() const { return threadLevel_; }
  bool initialisedByHora() const { return initialisedByHora_; }
  int worldRank() const { return worldRank_; }
  int worldSize() const { return worldSize_; }

  // The user-defined reduction for a dtype Hora reduces itself (16-bit floats, 8- and 16-bit
  // integers; see mpi_datatypes.h) and an element-wise op (Sum, Min, Max, Product).
  MPI_Op ownOp(DataType dtype, ReduceOp op) const;

  // A communicator over the given MPI_COMM_WORLD ranks (in that order), made with
  // MPI_Comm_create_group: collective over those ranks only. Cached, so that every init with
  // the same list reuses one communicator; freed at finalisation. Throws InvalidArgument when
  // this process is not listed; ends the process (kTimeoutAbortCode) when a listed rank has not
  // joined within startTimeout.
  MPI_Comm worldSubset(const std::vector<int>& worldRanks, Millis startTimeout);

  // Takes a communicator Hora no longer uses; it is freed only at finalisation. Freeing it now
  // would let MPI reuse its context id for a later communicator (a re-init), and messages the
  // old one never received (a shutdown request that crossed the coordinator's own shutdown)
  // would then be delivered to the new one.
  void retire(MPI_Comm comm);

  // Called by the exit handler.
  void finalizeAtExit();

 private:
  MpiContext();
  void initialise();

  int threadLevel_ = MPI_THREAD_SINGLE;
  bool initialisedByHora_ = false;
  int worldRank_ = 0;
  int worldSize_ = 1;
  // [kOwnReductionTypes][sum, min, max, product]; MPI_OP_NULL until made
  MPI_Op ops_[kOwnReductionTypeCount][4];
  std::map<std::vector<int>, MPI_Comm> subsets_;
  std::vector<MPI_Comm> retired_;
};

// Text of an MPI error code.
std::string mpiErrorText(int code);

// Throws IoError "<what>: <MPI error text>" unless rc is MPI_SUCCESS.
void checkMpi(int rc, const std::string& what);

// The tag for MPI_Comm_create_group over these ranks: the same on every member, and unlikely to
// be shared by a concurrent creation over another, overlapping group.
int groupTag(const std::vector<int>& ranks);

// The communicator whose Fortran handle is `handle` (not kNoMpiComm); `what` names it in the
// InvalidArgument thrown for a value no MPI_Fint holds or for MPI_COMM_NULL.
MPI_Comm commFromHandle(int64_t handle, const std::string& what);

// Name of an MPI thread level ("MPI_THREAD_MULTIPLE", ...).
const char* threadLevelName(int level);

// Initialises MPI if needed and describes the communicator the engine should run on: the one
// whose Fortran handle is commF (an mpi4py communicator's py2f()), the MPI_COMM_WORLD ranks
// listed in worldRanks, or MPI_COMM_WORLD when commF is kNoMpiComm and worldRanks is empty.
// Collective over that communicator: a member that has not called it within startTimeout (> 0)
// aborts the MPI job (mpi_wait.h).
MpiCommInfo describeMpiComm(int64_t commF, const std::vector<int>& worldRanks, Millis startTimeout);

}  // namespace mpi
}  // namespace hora
