#include "core/transport/mpi/transport.h"

#include <climits>

#include "core/common/errors.h"
#include "core/transport/mpi/communicator.h"
#include "core/transport/mpi/control_channel.h"
#include "core/transport/mpi/job_comm.h"

namespace hora {
namespace mpi {

Connection MpiTransport::connect(const ConnectOptions& options, Store&) {
  MPI_Comm base = jobComm(options).comm;
  MPI_Comm data = MPI_COMM_NULL, control = MPI_COMM_NULL;
  checkMpi(MPI_Comm_dup(base, &data), "mpi transport: MPI_Comm_dup");
  int rc = MPI_Comm_dup(base, &control);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&data);
    checkMpi(rc, "mpi transport: MPI_Comm_dup");
  }
  Connection c;
  try {
    c.world = std::make_unique<MpiCommunicator>(data, options.rank, INT_MAX, options.opTimeout);
  } catch (...) {
    MPI_Comm_free(&control);
    throw;
  }
  c.control = std::make_unique<MpiControlChannel>(control, options.rank, options.opTimeout);
  return c;
}

}  // namespace mpi
}  // namespace hora
