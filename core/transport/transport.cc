#include "core/transport/transport.h"

#include "core/common/errors.h"
#include "core/config.h"
#include "core/transport/shm/transport.h"
#include "core/transport/tcp/transport.h"
#if HORA_HAVE_MPI
#include "core/transport/mpi/transport.h"
#endif

namespace hora {

std::unique_ptr<Transport> makeTransport(const std::string& name) {
  // "gloo" is what Horovod configurations name; the TCP transport plays Gloo's role here.
  if (name == "tcp" || name == "gloo") return std::make_unique<tcp::TcpTransport>();
  if (name == "shm") return std::make_unique<shm::ShmTransport>();
  if (name == "mpi") {
#if HORA_HAVE_MPI
    return std::make_unique<mpi::MpiTransport>();
#endif
    throw NotSupported(
        "transport 'mpi' is not available: this build has no MPI transport (use 'tcp')");
  }
  if (name == "nccl") {
    throw NotSupported(
        "transport 'nccl' is not available: this build has no NCCL transport (use 'tcp')");
  }
  throw InvalidArgument("unknown transport '" + name + "' (known: tcp, gloo, shm, mpi, nccl)");
}

}  // namespace hora
