#pragma once
// MpiControlChannel: ControlChannel (see core/transport/control_channel.h) over a private
// duplicate of the job's MPI communicator, so control messages never match data traffic or the
// application's own MPI messages.
//
// A message is one MPI message of bytes (tag kControlTag); MPI's non-overtaking rule keeps each
// sender's messages in order. poll() takes what is there with MPI_Improbe(MPI_ANY_SOURCE) and
// MPI_Mrecv; while nothing is, it first polls for `spin` yielding the processor (core/common/
// spin.h), then sleeps with a back-off that starts at 10 us and doubles up to 1 ms, waiting on a
// condition variable that wakeup() signals, so a wakeup from another thread ends the wait at
// once. No wait spins without yielding or sleeping.
//
// send() posts MPI_Isend and returns without waiting for it to complete: MPI delivers a large
// message only once the receiver matches it, and the receiver may be busy in a collective that
// waits for this rank (always so when the collectives run on another transport, which makes no
// MPI calls). The channel owns the buffer until the request completes; send() and poll() reap
// completed requests. A send still pending after this rank has waited the op timeout in poll()
// makes poll() throw TimeoutError (time spent elsewhere, in collectives that keep the receiver
// busy too, does not count). Destroying the channel cancels what is still pending.
//
// A peer that dies normally makes the MPI launcher abort the job (MPI's fault handling); an MPI
// error reported instead is thrown as IoError. Threads: send()/poll() from the background
// thread only; wakeup() from any thread.
#include <atomic>
#include <condition_variable>
#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "core/common/time.h"
#include "core/transport/control_channel.h"
#include "core/transport/mpi/mpi_context.h"

namespace hora {
namespace mpi {

class MpiControlChannel : public ControlChannel {
 public:
  // Takes ownership of comm (a communicator private to this channel).
  MpiControlChannel(MPI_Comm comm, int worldRank, Millis opTimeout);
  ~MpiControlChannel() override;
  MpiControlChannel(const MpiControlChannel&) = delete;
  MpiControlChannel& operator=(const MpiControlChannel&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "mpi"; }
  void send(int to, const std::string& bytes) override;
  void poll(std::vector<Message>& out, Millis timeout, Micros spin = Micros(0)) override;
  void wakeup() override;

 private:
  struct PendingSend {
    MPI_Request request;
    std::string bytes;
    int to;
    Clock::duration waited{0};  // time this rank spent in poll() while it was pending
  };

  // Receives every message already available into out; returns how many.
  size_t receiveAvailable(std::vector<Message>& out);
  // Waits up to `wait` (or until wakeup()); returns true when woken.
  bool sleepFor(std::chrono::microseconds wait);
  // Drops completed sends from pending_. `waited` (time spent polling since the last call) is
  // added to each one still pending; one that has waited the op timeout throws TimeoutError.
  void reapSends(Clock::duration waited);
  [[noreturn]] void fail(const std::string& what, int rc) const;

  MpiContext& context_;
  MpiContext::Lease lease_;
  MPI_Comm comm_;
  int worldRank_;
  Millis opTimeout_;
  int rank_ = 0;
  int size_ = 1;
  std::list<PendingSend> pending_;  // sends whose requests have not completed yet

  std::mutex wakeMu_;
  std::condition_variable wakeCv_;
  std::atomic<bool> woken_{false};
};

}  // namespace mpi
}  // namespace hora
