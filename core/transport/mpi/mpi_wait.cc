#include "core/transport/mpi/mpi_wait.h"

#include <cstdlib>

#include "core/common/errors.h"
#include "core/common/logging.h"

namespace hora {
namespace mpi {

int awaitOrAbort(MPI_Request* requests, int count, MPI_Status* statuses, Millis timeout,
                 MPI_Comm abortComm, const std::function<std::string()>& timeoutMessage) {
  const auto start = Clock::now();
  while (true) {
    int done = 0;
    int rc = MPI_Testall(count, requests, &done, statuses ? statuses : MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
    if (done) return MPI_SUCCESS;
    if (timeout.count() > 0 && Clock::now() - start >= timeout) {
      std::string message = timeoutMessage();
      HORA_LOG(Error, message);
      MPI_Abort(abortComm, kTimeoutAbortCode);
      throw TimeoutError(message);  // MPI_Abort does not return on a conforming MPI
    }
    std::this_thread::yield();
  }
}

ExitWatchdog::ExitWatchdog(Millis timeout, std::string message) {
  if (timeout.count() <= 0) return;
  thread_ = std::thread([this, timeout, message = std::move(message)] {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, timeout, [this] { return disarmed_; })) return;
    HORA_LOG(Error, message);
    std::_Exit(kTimeoutAbortCode);
  });
}

ExitWatchdog::~ExitWatchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    disarmed_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

}  // namespace mpi
}  // namespace hora
