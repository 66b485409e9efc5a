#pragma once
// Bounded waits on MPI: polled non-blocking requests, blocking calls under a watchdog, and a call
// that can only be watched from outside the process's MPI use.
//
// MPI progresses a transfer only inside its calls, so the wait tests and yields between tests
// (sleeping would stall long pipelined messages; yielding keeps a core as free as MPI_Wait's own
// busy polling does). MPI cannot cancel a collective: a wait that passes its bound logs why and
// aborts the whole MPI job with exit code kTimeoutAbortCode, which ends every process instead of
// leaving some blocked forever.
#include <atomic>
#include <condition_variable>
#include <cstdint>
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

// Bounds blocking MPI calls. Open MPI serves blocking collectives from its tuned component and
// non-blocking ones from libnbc, which is up to 3x slower on one host (an in-place
// MPI_Iallreduce of 64 MiB: 50 ms against MPI_Allreduce's 21 ms at 2 ranks), so the data path
// calls the blocking forms and this watchdog bounds them: guard() marks the call as running (atomic
// stores and a clock read, no system call), and a thread of the watchdog's own, waking a few times
// per bound, finds a call that has run past the bound, logs describe(op, call) and aborts the MPI
// job: MPI_Abort on abortComm when MPI runs at MPI_THREAD_MULTIPLE (any thread may call it), else
// _Exit(kTimeoutAbortCode), after which mpirun ends the other processes. timeout <= 0 starts no
// thread and bounds nothing. One calling thread at a time, as a Communicator is used.
class CallWatchdog {
 public:
  using Describe = std::function<std::string(const char* op, const char* call)>;
  CallWatchdog(Millis timeout, MPI_Comm abortComm, bool abortFromAnyThread, Describe describe);
  ~CallWatchdog();
  CallWatchdog(const CallWatchdog&) = delete;
  CallWatchdog& operator=(const CallWatchdog&) = delete;

  // Runs call() (an MPI call returning its error code) under the bound and returns its code.
  template <typename Call>
  int guard(const char* op, const char* name, Call&& call) {
    if (!thread_.joinable()) return call();
    op_.store(op, std::memory_order_relaxed);
    call_.store(name, std::memory_order_relaxed);
    startedNs_.store(nowNs(), std::memory_order_release);
    int rc = call();
    startedNs_.store(0, std::memory_order_release);
    return rc;
  }

 private:
  static int64_t nowNs();
  void watch();

  const Millis timeout_;
  const MPI_Comm abortComm_;
  const bool abortFromAnyThread_;
  const Describe describe_;
  std::atomic<int64_t> startedNs_{0};  // when the guarded call began; 0: none running
  std::atomic<const char*> op_{""};
  std::atomic<const char*> call_{""};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

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
