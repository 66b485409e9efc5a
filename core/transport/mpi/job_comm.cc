#include "core/transport/mpi/job_comm.h"

#include "core/common/errors.h"

namespace hora {
namespace mpi {

JobComm jobComm(const ConnectOptions& options) {
  MpiContext& context = MpiContext::acquire();
  JobComm job{MPI_COMM_WORLD, "MPI_COMM_WORLD"};
  if (options.mpiComm != kNoMpiComm) {
    job.what = "the communicator given to hora.init(comm=...)";
    job.comm = commFromHandle(options.mpiComm, job.what);
  }
  int rank = 0, size = 1;
  checkMpi(MPI_Comm_rank(job.comm, &rank), "mpi transport: MPI_Comm_rank of " + job.what);
  checkMpi(MPI_Comm_size(job.comm, &size), "mpi transport: MPI_Comm_size of " + job.what);
  // Hora's ranks come from the launcher and MPI's from the MPI job; collectives would pair the
  // wrong peers if they differed, so the mismatch is refused here.
  if (rank != options.rank || size != options.size) {
    throw InvalidArgument(
        "mpi transport: this process is rank " + std::to_string(options.rank) + " of " +
        std::to_string(options.size) + " for Hora, but rank " + std::to_string(rank) + " of " +
        std::to_string(size) + " in " + job.what + " (MPI world rank " +
        std::to_string(context.worldRank()) + " of " + std::to_string(context.worldSize()) +
        "). Start the job with mpirun, or use the TCP transport (HORA_CONTROLLER=tcp "
        "HORA_CPU_OPERATIONS=tcp) with horarun.");
  }
  return job;
}

}  // namespace mpi
}  // namespace hora
