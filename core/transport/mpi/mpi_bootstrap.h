#pragma once
// A rendezvous store for the TCP transport in a job that mpirun started. A job that runs one role
// over TCP and the other over MPI (HORA_CONTROLLER=mpi HORA_CPU_OPERATIONS=tcp, or the reverse)
// needs a store for the TCP mesh, but mpirun serves none. MPI already connects the ranks, so
// rank 0 of the job's communicator (job_comm.h) serves a TcpStoreServer on a free port under a
// fresh random secret, and broadcasts "host:port" and the secret over MPI; every rank then
// connects a TcpStoreClient. The secret travels only over MPI, so only the job's ranks can use the
// store, and the TCP mesh, whose handshake proves the same secret, admits only them too.
//
// bootstrapStore() is collective over the job's communicator. The address rank 0 advertises is
// advertisedHost(options.listenHost) (HORA_IFACE, else this host's resolved name). A rank 0 that
// cannot start the server still broadcasts, so every rank fails with the same IoError instead of
// hanging.
#include "core/transport/backends.h"
#include "core/transport/transport.h"

namespace hora {
namespace mpi {

BootstrappedStore bootstrapStore(const ConnectOptions& options);

}  // namespace mpi
}  // namespace hora
