#include "core/transport/mpi/mpi_wait.h"

#include <algorithm>
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
    // Testing rather than MPI_Waitall is what makes the wait bounded: MPI_Waitall has no timeout.
    int rc = MPI_Testall(count, requests, &done, statuses ? statuses : MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return rc;
    if (done) return MPI_SUCCESS;
    if (timeout.count() > 0 && Clock::now() - start >= timeout) {
      std::string message = timeoutMessage();
      HORA_LOG(Error, message);
      MPI_Abort(abortComm, kTimeoutAbortCode);
      throw TimeoutError(message);  // MPI_Abort does not return on a conforming MPI
    }
    // MPI progresses transfers only inside its calls, so the loop tests again at once after
    // yielding rather than sleeping (mpi_wait.h).
    std::this_thread::yield();
  }
}

CallWatchdog::CallWatchdog(Millis timeout, MPI_Comm abortComm, bool abortFromAnyThread,
                           Describe describe)
    : timeout_(timeout),
      abortComm_(abortComm),
      abortFromAnyThread_(abortFromAnyThread),
      describe_(std::move(describe)) {
  // No bound means no thread: guard() then calls straight through.
  if (timeout_.count() > 0) thread_ = std::thread([this] { watch(); });
}

CallWatchdog::~CallWatchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int64_t CallWatchdog::nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
             .count() +
         1;  // never 0, which means "no call running"
}

void CallWatchdog::watch() {
  // Checking 20 times per bound overshoots it by at most 5%; at least every 10 ms, at most 1 s.
  const Millis period = std::clamp(timeout_ / 20, Millis(10), Millis(1000));
  const int64_t boundNs = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_).count();
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
    // Acquire pairs with guard()'s release store, so op_ and call_ read below are at least as new
    // as this start; the second load below rules out a newer call.
    int64_t started = startedNs_.load(std::memory_order_acquire);
    if (started == 0 || nowNs() - started < boundNs) continue;
    const char* op = op_.load(std::memory_order_relaxed);
    const char* call = call_.load(std::memory_order_relaxed);
    // The same call still running (a later one would have a later start): past its bound.
    if (startedNs_.load(std::memory_order_acquire) != started) continue;
    std::string message = describe_(op, call);
    if (abortFromAnyThread_) {
      HORA_LOG(Error, message);
      MPI_Abort(abortComm_, kTimeoutAbortCode);
    }
    HORA_LOG(Error, message +
                        " (MPI runs below MPI_THREAD_MULTIPLE, where only the blocked "
                        "thread may call MPI_Abort: this process exits with code " +
                        std::to_string(kTimeoutAbortCode) + " and mpirun ends the others)");
    // _Exit rather than exit: no exit handler or static destructor runs while another thread is
    // blocked inside MPI.
    std::_Exit(kTimeoutAbortCode);
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
