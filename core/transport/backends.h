#pragma once
// Which transports this build of the engine contains, and the services of optional transports
// that code outside core/transport/ needs (the runtime's store bootstrap, the bindings' MPI
// queries). Callers ask here instead of testing HORA_HAVE_* themselves, so the build's transport
// switches stay inside core/transport/.
//
// Contract: a service of a transport this build lacks throws NotSupported naming what is missing
// (callers that reach one have usually been refused already, by makeTransport()). The MPI services
// initialise MPI on first use (core/transport/mpi/mpi_context.h) and are collective where noted.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/store/store.h"
#include "core/store/tcp_store.h"
#include "core/transport/transport.h"

namespace hora {

// True for the transports makeTransport() can build here: "tcp" (alias "gloo") and "shm" always,
// "mpi" when an MPI was found at build time. False for every other name.
bool transportBuilt(const std::string& name);

// A rendezvous store made without a launcher: rank 0 serves it, every rank is a client.
struct BootstrappedStore {
  std::unique_ptr<TcpStoreServer> server;  // rank 0 only; must outlive every use of the store
  std::unique_ptr<Store> client;
  std::string secret;  // 64 hex digits; the TCP transport proves it too
};

// For TCP beside MPI under mpirun, which serves no store: rank 0 of the job's MPI communicator
// serves one and tells the others over MPI (core/transport/mpi/mpi_bootstrap.h). Collective over
// that communicator.
BootstrappedStore bootstrapStoreOverMpi(const ConnectOptions& options);

// Where a process sits in an MPI communicator (the communicator the engine will run on).
struct MpiCommInfo {
  int64_t commF = kNoMpiComm;  // Fortran handle of the communicator (MPI_Comm_c2f)
  int rank = 0;
  int size = 1;
  int localRank = 0;  // among the members on this host (MPI_COMM_TYPE_SHARED)
  int localSize = 1;
  int crossRank = 0;  // among the members with the same local rank
  int crossSize = 1;
};

// Describes the communicator whose Fortran handle is commF, the MPI_COMM_WORLD ranks listed in
// worldRanks, or MPI_COMM_WORLD (commF == kNoMpiComm, worldRanks empty). Collective over it,
// bounded by startTimeout (HORA_START_TIMEOUT).
MpiCommInfo mpiCommInfo(int64_t commF, const std::vector<int>& worldRanks, Millis startTimeout);

// True when MPI runs at MPI_THREAD_MULTIPLE.
bool mpiThreadMultiple();

}  // namespace hora
