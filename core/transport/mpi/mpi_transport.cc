#include "core/transport/mpi/mpi_transport.h"

#include <limits>

#include "core/common/errors.h"
#include "core/transport/mpi/mpi_communicator.h"
#include "core/transport/mpi/mpi_context.h"
#include "core/transport/mpi/mpi_control_channel.h"

namespace hora {
namespace mpi {

Connection MpiTransport::connect(const ConnectOptions& options, Store&) {
  MpiContext& context = MpiContext::acquire();
  MPI_Comm base = MPI_COMM_WORLD;
  std::string what = "MPI_COMM_WORLD";
  if (options.mpiComm >= 0) {
    if (options.mpiComm > std::numeric_limits<MPI_Fint>::max()) {
      throw InvalidArgument("mpi transport: " + std::to_string(options.mpiComm) +
                            " is not an MPI communicator handle");
    }
    base = MPI_Comm_f2c(static_cast<MPI_Fint>(options.mpiComm));
    what = "the communicator given to hora.init(comm=...)";
    if (base == MPI_COMM_NULL) throw InvalidArgument("mpi transport: " + what + " is MPI_COMM_NULL");
  }
  int rank = 0, size = 1;
  checkMpi(MPI_Comm_rank(base, &rank), "mpi transport: MPI_Comm_rank of " + what);
  checkMpi(MPI_Comm_size(base, &size), "mpi transport: MPI_Comm_size of " + what);
  if (rank != options.rank || size != options.size) {
    throw InvalidArgument(
        "mpi transport: this process is rank " + std::to_string(options.rank) + " of " +
        std::to_string(options.size) + " for Hora, but rank " + std::to_string(rank) + " of " +
        std::to_string(size) + " in " + what + " (MPI world rank " +
        std::to_string(context.worldRank()) + " of " + std::to_string(context.worldSize()) +
        "). Start the job with mpirun, or use the TCP transport (HORA_CONTROLLER=tcp "
        "HORA_CPU_OPERATIONS=tcp) with horarun.");
  }
  MPI_Comm data = MPI_COMM_NULL, control = MPI_COMM_NULL;
  checkMpi(MPI_Comm_dup(base, &data), "mpi transport: MPI_Comm_dup");
  int rc = MPI_Comm_dup(base, &control);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&data);
    checkMpi(rc, "mpi transport: MPI_Comm_dup");
  }
  Connection c;
  try {
    c.world = std::make_unique<MpiCommunicator>(data, options.rank);
  } catch (...) {
    MPI_Comm_free(&control);
    throw;
  }
  c.control = std::make_unique<MpiControlChannel>(control, options.rank, options.opTimeout);
  return c;
}

}  // namespace mpi
}  // namespace hora
