#include "core/transport/mpi/transport.h"

#include <climits>
#include <string>

#include "core/common/errors.h"
#include "core/transport/mpi/communicator.h"
#include "core/transport/mpi/control_channel.h"
#include "core/transport/mpi/job_comm.h"
#include "core/transport/mpi/mpi_wait.h"

namespace hora {
namespace mpi {

Connection MpiTransport::connect(const ConnectOptions& options, Store&) {
  MPI_Comm base = jobComm(options).comm;
  // MPI_Comm_dup blocks without a bound until every rank calls it. A rank may never come: it
  // failed init before this point (process sets that differ between ranks, say) or never called
  // it. Once every rank has passed this barrier, the dups wait for no one who has not come.
  MPI_Request arrived = MPI_REQUEST_NULL;
  checkMpi(MPI_Ibarrier(base, &arrived), "mpi transport: MPI_Ibarrier");
  checkMpi(awaitOrAbort(&arrived, 1, nullptr, options.startTimeout, base,
                        [&] {
                          return "rank " + std::to_string(options.rank) +
                                 ": mpi transport: not every rank reached the MPI transport's "
                                 "set-up within HORA_START_TIMEOUT (" +
                                 std::to_string(options.startTimeout.count() / 1000) +
                                 " s): a rank failed hora.init() before it (for example on "
                                 "process sets that differ between ranks) or never called it. "
                                 "MPI cannot cancel a collective, so the MPI job is aborted.";
                        }),
           "mpi transport: MPI_Ibarrier");
  // Two private duplicates: control messages and data traffic can never match each other's
  // receives, nor the application's own messages on the job's communicator.
  MPI_Comm data = MPI_COMM_NULL, control = MPI_COMM_NULL;
  checkMpi(MPI_Comm_dup(base, &data), "mpi transport: MPI_Comm_dup");
  int rc = MPI_Comm_dup(base, &control);
  // The first duplicate has no owner yet; it is freed here so a failed set-up leaks nothing.
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&data);
    checkMpi(rc, "mpi transport: MPI_Comm_dup");
  }
  Connection c;
  try {
    // INT_MAX is MPI's largest count; the communicator splits larger buffers into calls of that
    // size.
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
