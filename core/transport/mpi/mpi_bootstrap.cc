#include "core/transport/mpi/mpi_bootstrap.h"

#include "core/common/errors.h"
#include "core/common/hmac.h"
#include "core/common/logging.h"
#include "core/net/handshake.h"
#include "core/net/socket.h"
#include "core/transport/mpi/job_comm.h"
#include "core/transport/mpi/mpi_wait.h"

namespace hora {
namespace mpi {
namespace {

constexpr size_t kSecretBytes = 32;
// What rank 0 broadcasts: "ok <host:port> <secret>" or "error <why it could not serve>".
const std::string kOk = "ok ";
const std::string kFailed = "error ";

// One broadcast from rank 0, bounded by the start timeout: a rank that never comes aborts the job.
void bootstrapBcast(const JobComm& job, void* data, int count, MPI_Datatype type, Millis timeout) {
  const std::string what = "store bootstrap: MPI_Ibcast over " + job.what;
  MPI_Request request = MPI_REQUEST_NULL;
  // The non-blocking form, so the wait can be bounded: MPI_Bcast would wait for ever on a rank that
  // never comes.
  checkMpi(MPI_Ibcast(data, count, type, 0, job.comm, &request), what);
  checkMpi(awaitOrAbort(&request, 1, nullptr, timeout, job.comm,
                        [&] {
                          return what + " did not complete within HORA_START_TIMEOUT (" +
                                 std::to_string(timeout.count() / 1000) +
                                 " s): a rank of the job did not start Hora. MPI cannot cancel a "
                                 "collective, so the MPI job is aborted.";
                        }),
           what);
}

// Rank 0's text on every rank: the length first, then the bytes.
std::string broadcastText(const JobComm& job, std::string text, Millis timeout) {
  unsigned long long length = text.size();
  // Only rank 0 knows the length, so it travels first and every rank sizes its buffer from it.
  bootstrapBcast(job, &length, 1, MPI_UNSIGNED_LONG_LONG, timeout);
  text.resize(length);
  bootstrapBcast(job, &text[0], static_cast<int>(length), MPI_CHAR, timeout);
  return text;
}

bool startsWith(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace

BootstrappedStore bootstrapStore(const ConnectOptions& options) {
  JobComm job = jobComm(options);
  // Held while this function makes MPI calls, as every user of MPI holds one (mpi_context.h).
  MpiContext::Lease lease;
  BootstrappedStore out;
  std::string message;
  if (options.rank == 0) {
    try {
      // Rank 0 makes the job's secret itself: under mpirun no launcher of Hora's hands one out.
      std::string random = net::randomBytes(kSecretBytes);
      std::string secret = toHex(reinterpret_cast<const uint8_t*>(random.data()), random.size());
      // Bound to the address it advertises, like every listener of the job.
      std::string host = net::advertisedHost(options.listenHost);
      out.server = std::make_unique<TcpStoreServer>(host, 0, secret);
      std::string address = net::joinHostPort(host, out.server->port());
      message = kOk + address + " " + secret;
      HORA_LOG(Debug, "rank 0: serving the rendezvous store for TCP at " << address);
    } catch (const Error& e) {
      message = kFailed + std::string(e.what());
    }
  }
  // Rank 0 broadcasts even when it failed, so every rank learns why instead of waiting out the
  // timeout.
  message = broadcastText(job, message, options.startTimeout);
  if (startsWith(message, kFailed)) {
    throw IoError(
        "rank 0 could not start the rendezvous store the TCP transport needs beside "
        "MPI: " +
        message.substr(kFailed.size()));
  }
  size_t space = message.find(' ', kOk.size());
  HORA_CHECK(startsWith(message, kOk) && space != std::string::npos,
             "malformed store bootstrap message");
  std::string host;
  int port = 0;
  net::parseHostPort(message.substr(kOk.size(), space - kOk.size()), &host, &port);
  out.secret = message.substr(space + 1);
  HORA_CHECK(out.secret.size() == 2 * kSecretBytes, "malformed store bootstrap secret");
  out.client = std::make_unique<TcpStoreClient>(host, port, out.secret, options.startTimeout);
  return out;
}

}  // namespace mpi
}  // namespace hora
