#include "core/transport/mpi/control_channel.h"

#include <algorithm>
#include <thread>

#include "core/common/errors.h"
#include "core/transport/control_frames.h"

namespace hora {
namespace mpi {
namespace {

// The communicator is a private duplicate, so one tag is enough; it only has to be the same on
// every rank.
constexpr int kControlTag = 7;
// Waiting, after the spin budget: sleep with a doubling back-off.
constexpr std::chrono::microseconds kFirstSleep{10};
constexpr std::chrono::microseconds kMaxSleep{1000};

}  // namespace

MpiControlChannel::MpiControlChannel(MPI_Comm comm, int worldRank, Millis opTimeout)
    : context_(MpiContext::acquire()), comm_(comm), worldRank_(worldRank), opTimeout_(opTimeout) {
  // Errors come back as codes, so a failed peer becomes an IoError rather than an abort of the job
  // from inside MPI.
  int rc = MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_rank(comm_, &rank_);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(comm_, &size_);
  if (rc != MPI_SUCCESS) fail("cannot set up the control communicator", rc);
}

MpiControlChannel::~MpiControlChannel() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // Drop what completed (a failure no longer matters here); what is left is cancelled below.
  pending_.remove_if([](PendingSend& p) {
    int done = 0;
    return MPI_Test(&p.request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done;
  });
  if (!pending_.empty()) {
    // Sends to ranks that never received them (they failed or left). MPI may still read the
    // buffers after the requests are released, so those buffers are deliberately never freed.
    // A freed request may still be in progress inside MPI, which keeps reading its buffer; leaking
    // the list is the only way to keep those buffers valid.
    auto* orphans = new std::list<PendingSend>();
    orphans->splice(orphans->end(), pending_);
    for (auto& p : *orphans) {
      MPI_Cancel(&p.request);
      MPI_Request_free(&p.request);
    }
  }
  // Kept until exit rather than freed: a later communicator could otherwise reuse its context id
  // and receive messages still in flight on this one (mpi_context.h).
  context_.retire(comm_);
}

void MpiControlChannel::fail(const std::string& what, int rc) const {
  throw IoError("rank " + std::to_string(worldRank_) + ": mpi control channel: " + what + ": " +
                mpiErrorText(rc) + " (a peer probably exited or failed; see its log)");
}

void MpiControlChannel::wakeup() {
  {
    std::lock_guard<std::mutex> lock(wakeMu_);
    // Set under the mutex, so the flag cannot change between sleepFor()'s check and its wait, and
    // the notification is never lost.
    woken_.store(true);
  }
  wakeCv_.notify_one();
}

bool MpiControlChannel::sleepFor(std::chrono::microseconds wait) {
  std::unique_lock<std::mutex> lock(wakeMu_);
  wakeCv_.wait_for(lock, wait, [this] { return woken_.load(); });
  // exchange consumes the wakeup: one wakeup() ends at most one wait.
  return woken_.exchange(false);
}

void MpiControlChannel::reapSends(Clock::duration waited) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    int done = 0;
    int rc = MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) fail("sending to rank " + std::to_string(it->to) + " failed", rc);
    // Only time spent waiting in poll() counts, as the header says: a receiver busy in a collective
    // with this rank is not a dead one.
    if (!done) it->waited += waited;
    if (!done && it->waited >= opTimeout_) {
      throw TimeoutError("rank " + std::to_string(rank_) + ": rank " + std::to_string(it->to) +
                         " accepted no control data for " + std::to_string(opTimeout_.count()) +
                         " ms");
    }
    it = done ? pending_.erase(it) : std::next(it);
  }
}

size_t MpiControlChannel::receiveAvailable(std::vector<Message>& out) {
  size_t received = 0;
  for (;;) {
    int found = 0;
    MPI_Message message = MPI_MESSAGE_NULL;
    MPI_Status status;
    // A matched probe: the message whose size was read is the one MPI_Mrecv receives, whatever
    // arrives in between.
    int rc = MPI_Improbe(MPI_ANY_SOURCE, kControlTag, comm_, &found, &message, &status);
    if (rc != MPI_SUCCESS) fail("MPI_Improbe failed", rc);
    if (!found) return received;
    int count = 0;
    MPI_Get_count(&status, MPI_BYTE, &count);
    std::string bytes(static_cast<size_t>(std::max(count, 0)), '\0');
    rc = MPI_Mrecv(bytes.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      fail("receiving from rank " + std::to_string(status.MPI_SOURCE) + " failed", rc);
    out.push_back({status.MPI_SOURCE, std::move(bytes)});
    ++received;
  }
}

void MpiControlChannel::send(int to, const std::string& bytes) {
  // The same star as the other control channels: negotiation goes through rank 0 only.
  if (to < 0 || to >= size_ || to == rank_ || (rank_ != 0 && to != 0)) {
    throw InvalidArgument("rank " + std::to_string(rank_) + ": no control route to rank " +
                          std::to_string(to) +
                          " (rank 0 talks to every rank, the others only to rank 0)");
  }
  if (bytes.size() > kMaxControlMessageBytes) {
    throw InvalidArgument("rank " + std::to_string(rank_) + ": control message of " +
                          std::to_string(bytes.size()) + " bytes exceeds the limit");
  }
  // The channel keeps its own copy until the send completes; a std::list never moves its elements,
  // so the buffer MPI was given stays where it is.
  pending_.push_back({MPI_REQUEST_NULL, bytes, to});
  auto mine = std::prev(pending_.end());
  int rc = MPI_Isend(mine->bytes.data(), static_cast<int>(mine->bytes.size()), MPI_BYTE, to,
                     kControlTag, comm_, &mine->request);
  if (rc != MPI_SUCCESS) {
    pending_.erase(mine);
    fail("sending to rank " + std::to_string(to) + " failed", rc);
  }
  reapSends(Clock::duration(0));  // drops this send (a small one is usually done at once) and
                                  // any earlier one that completed meanwhile
}

void MpiControlChannel::poll(std::vector<Message>& out, Millis timeout, Micros spin) {
  size_t before = out.size();
  const auto start = Clock::now();
  const bool forever = timeout.count() < 0;
  // MPI offers nothing to block on for an incoming message together with a wakeup from another
  // thread, so waiting is polling with a growing sleep.
  const auto deadline = forever ? Clock::time_point::max() : start + timeout;
  auto sleep = kFirstSleep;
  auto lastReap = start;
  for (;;) {
    auto beforeReap = Clock::now();
    reapSends(beforeReap - lastReap);
    lastReap = beforeReap;
    receiveAvailable(out);
    if (out.size() > before) return;
    // A wakeup() that came while this thread was busy in MPI calls still ends this poll.
    if (woken_.exchange(false)) return;
    auto now = Clock::now();
    if (!forever && now >= deadline) return;
    if (now - start < spin) {
      // Within the spin budget the thread only yields between probes, for the lowest latency while
      // a reply is about to come.
      std::this_thread::yield();
      continue;
    }
    auto wait = sleep;
    // The extra microsecond makes the last sleep end at or after the deadline, not just before.
    if (!forever) {
      wait = std::min(wait, std::chrono::duration_cast<std::chrono::microseconds>(deadline - now) +
                                std::chrono::microseconds(1));
    }
    if (sleepFor(wait)) return;
    sleep = std::min(sleep * 2, kMaxSleep);
  }
}

}  // namespace mpi
}  // namespace hora
