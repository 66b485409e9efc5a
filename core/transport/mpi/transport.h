#pragma once
// MpiTransport: the "mpi" transport. The processes are already connected by MPI (mpirun, or an
// MPI_Init done by the application or mpi4py), so connect() ignores the rendezvous store: it
// initialises MPI if nobody has (mpi_context.h), takes the communicator to run on
// (job_comm.h: ConnectOptions::mpiComm, or MPI_COMM_WORLD), checks that its rank and size are the
// ones the runtime was given (InvalidArgument otherwise), and duplicates it twice: one private
// communicator for data (MpiCommunicator) and one for the control plane (MpiControlChannel).
// connect() is collective over that communicator and, like every MPI call, has no timeout.
// Stateless: one instance may connect any number of times in a process (re-init after shutdown).
#include <string>

#include "core/transport/transport.h"

namespace hora {
namespace mpi {

class MpiTransport : public Transport {
 public:
  std::string name() const override { return "mpi"; }
  Connection connect(const ConnectOptions& options, Store& store) override;
};

}  // namespace mpi
}  // namespace hora
