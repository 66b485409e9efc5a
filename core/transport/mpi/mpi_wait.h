#pragma once
// Bounded waits on non-blocking MPI requests, for the data path and the job's start alike.
//
// MPI progresses a transfer only inside its calls, so the wait tests and yields between tests
// (sleeping would stall long pipelined messages; yielding keeps a core as free as MPI_Wait's own
// busy polling does). MPI cannot cancel a collective: a wait that passes its bound logs why and
// aborts the whole MPI job with exit code kTimeoutAbortCode, which ends every process instead of
// leaving some blocked forever.
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/common/time.h"
#include "core/transport/mpi/mpi_context.h"

namespace hora {
namespace mpi {

// Exit code of every process of an MPI job aborted because a wait passed its bound.
constexpr int kTimeoutAbortCode = 124;

// Tests `requests` until all complete and returns MPI_SUCCESS, or returns the error code of a
// failed test. timeout <= 0 waits without bound; past it, logs timeoutMessage() and calls
// MPI_Abort on abortComm (and throws TimeoutError should MPI_Abort return).
int awaitOrAbort(MPI_Request* requests, int count, MPI_Status* statuses, Millis timeout,
                 MPI_Comm abortComm, const std::function<std::string()>& timeoutMessage);

// For a call that cannot be polled or aborted (MPI_Init_thread, whose start-up exchange waits for
// every process of the job): unless destroyed within `timeout` (> 0), logs `message` and ends the
// process with kTimeoutAbortCode; mpirun then ends the others. timeout <= 0 watches nothing.
class ExitWatchdog {
 public:
  ExitWatchdog(Millis timeout, std::string message);
  ~ExitWatchdog();
  ExitWatchdog(const ExitWatchdog&) = delete;
  ExitWatchdog& operator=(const ExitWatchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;
};

}  // namespace mpi
}  // namespace hora
