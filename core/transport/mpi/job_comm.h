#pragma once
// The MPI communicator a Hora job runs on: the one given to hora.init(comm=...) (by its Fortran
// handle, ConnectOptions::mpiComm) or MPI_COMM_WORLD. The MPI transport and the store bootstrap
// (mpi_bootstrap.h) both start here, so both refuse, with the same advice, a process whose MPI
// rank and size are not the ones Hora was given (a job that mpirun did not start).
// Initialises MPI if nobody has; not collective (MPI_Comm_rank/size only).
#include <string>

#include "core/transport/mpi/mpi_context.h"
#include "core/transport/transport.h"

namespace hora {
namespace mpi {

struct JobComm {
  MPI_Comm comm = MPI_COMM_NULL;  // not owned
  std::string what;               // how error messages name it
};

// Throws InvalidArgument for a handle that is no communicator, or when this process is not rank
// options.rank of options.size in it.
JobComm jobComm(const ConnectOptions& options);

}  // namespace mpi
}  // namespace hora
