#pragma once
// Mailbox: the matching of arrived point-to-point messages and posted receives of one rank. Pure
// logic (no sockets): the channel's I/O thread tells it what arrives, receiving threads post,
// wait for and withdraw receives, and tests drive both sides by hand.
//
// Matching (MPI's rules, with a tag and a source rank or kAnySource):
// - Messages from one source with one tag are received in the order they arrived (non-overtaking).
// - post() takes the oldest arrived message that matches (for kAnySource: the oldest from any
//   source); only when none has arrived is the receive queued.
// - A message whose header arrives goes to the oldest queued receive that matches (a receive for
//   its source or for any source, whichever was posted first); its payload is then written straight
//   into that receive's buffer. With none queued it is kept as an unexpected message in a buffer of
//   its own, which grows as the payload arrives (never sized from the header's length alone, so a
//   corrupt length costs only the bytes that really came). Unexpected messages have no cap: a
//   sender that runs far ahead of its receiver holds that much memory here.
// - A size mismatch (a message of M bytes for a receive of N != M) fails that receive with
//   InvalidArgument naming both sizes, the peer and the tag; the message is consumed.
//
// Ownership and threads:
// - A Receive is owned by its caller, who keeps it (and its buffer) alive from post() until the
//   receive is done or withdraw() returned. Any number of threads may post, wait and withdraw
//   concurrently, each on its own Receive.
// - The I/O side (arrive, beginChunk/endChunk, peerLost) is called by one thread at a time. It
//   writes payload bytes between beginChunk() and endChunk() without holding the mailbox's lock;
//   withdraw() and a post() that claims a message still arriving wait for such a chunk to end, so
//   the I/O side never writes into a buffer its owner got back.
// - Waits block on a condition variable up to a deadline; nothing spins.
//
// Errors end a receive (Receive::result rethrows them): InvalidArgument (size mismatch), IoError
// (the source's connection ended: queued receives from it fail at once, and later ones fail once
// the messages that arrived before the end are taken; a kAnySource receive fails only when every
// other rank's connection has ended), ShutdownError (after shutdown()).
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/common/time.h"

namespace hora {
namespace p2p {

constexpr int kAnySource = -1;
// The first buffer of an unexpected message holds at most this much; it doubles as bytes arrive.
constexpr size_t kFirstUnexpectedBytes = 64 << 10;

// An arrived message; defined in mailbox.cc.
struct ArrivedMessage;

// One receive: a buffer to fill with one message from `source` (or kAnySource) with `tag`.
class Receive {
 public:
  Receive(void* data, size_t bytes, int source, int64_t tag)
      : data_(static_cast<uint8_t*>(data)), bytes_(bytes), source_(source), tag_(tag) {}
  Receive(const Receive&) = delete;
  Receive& operator=(const Receive&) = delete;

  size_t bytes() const { return bytes_; }
  int source() const { return source_; }
  int64_t tag() const { return tag_; }
  // Once done: the rank the message came from, or the error that ended the receive, rethrown.
  int result() const;

 private:
  friend class Mailbox;
  enum class State { Idle, Posted, Matched, Done };

  uint8_t* data_;
  size_t bytes_;
  int source_;
  int64_t tag_;
  // Guarded by the mailbox's mutex.
  State state_ = State::Idle;
  uint64_t order_ = 0;                 // post order, while Posted
  ArrivedMessage* message_ = nullptr;  // while Matched
  int from_ = -1;
  std::exception_ptr error_;
  std::condition_variable done_;
};

// Where the I/O side writes the next payload bytes: at most `bytes` at `data`, or, when data is
// null, `bytes` to read and throw away.
struct PayloadChunk {
  uint8_t* data = nullptr;
  size_t bytes = 0;
};

class Mailbox {
 public:
  // Receives of rank `rank` in a job of `size` ranks (rank and size only name things in errors and
  // tell when every other rank is gone).
  Mailbox(int rank, int size);
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // ---- Receiving threads.
  // Matches r against what has arrived, else queues it. Never waits for the network (it may wait
  // for a chunk in progress to end). r may be done when this returns (check with test()).
  void post(Receive& r);
  bool test(Receive& r);
  // True once r is done; false when the deadline passed first (r is still posted).
  bool wait(Receive& r, Clock::time_point deadline);
  // Takes back a receive that is not done. True when withdrawn: the mailbox no longer refers to r
  // and never touches its buffer again; a message partly written into it goes back to the
  // unexpected messages, in its place, with the bytes that had arrived. False when r was done
  // first (its result stands).
  bool withdraw(Receive& r);

  // ---- The I/O side.
  // The header of a message from `source` arrived; its payload (if any) follows through chunks.
  void arrive(int source, int64_t tag, uint64_t bytes);
  // Every beginChunk() is followed by one endChunk() with the bytes written (0 is fine).
  PayloadChunk beginChunk(int source);
  void endChunk(int source, size_t written);
  // The connection from `source` ended (why: "rank 1 closed its point-to-point connection (...)").
  // A message cut short is dropped; receives that can no longer complete fail with IoError.
  void peerLost(int source, const std::string& why);

  // Fails every pending receive, and every later one, with ShutdownError(why). Idempotent.
  void shutdown(const std::string& why);

  // Arrived messages no receive has taken yet (including one still arriving).
  size_t unexpectedMessages() const;

 private:
  using Message = ArrivedMessage;
  using Key = std::pair<int64_t, int>;  // (tag, source)

  Message* oldestUnexpected(int source, int64_t tag) const;
  Receive* oldestPosted(int source, int64_t tag) const;
  void addUnexpected(Message* m);
  void removeUnexpected(Message* m);
  void removePosted(Receive& r);
  void awaitChunkEnd(std::unique_lock<std::mutex>& lock, Message* m);
  void fail(Receive& r, std::exception_ptr error);
  void complete(Receive& r, int from);
  void erase(Message* m);
  void detachForShutdown(Message* m);
  bool everyPeerGone() const;
  std::string me() const;
  std::string describe(int source, int64_t tag) const;
  std::exception_ptr sizeMismatch(const Receive& r, int source, uint64_t bytes) const;
  std::exception_ptr sourceGone(const Receive& r) const;

  const int rank_;
  const int size_;
  mutable std::mutex mutex_;
  std::condition_variable chunkEnded_;                               // see awaitChunkEnd
  std::unordered_map<uint64_t, std::unique_ptr<Message>> messages_;  // every live one, by arrival
  std::map<Key, std::deque<Message*>> unexpected_;  // per (tag, source), in arrival order
  std::map<Key, std::deque<Receive*>> posted_;      // per (tag, source or kAnySource), post order
  std::vector<Message*> arriving_;                  // per source: the message being read
  std::vector<std::string> gone_;                   // per source: why its connection ended
  int goneCount_ = 0;
  uint64_t nextArrival_ = 0;
  uint64_t nextPost_ = 0;
  bool shutdown_ = false;
  std::string shutdownWhy_;
};

}  // namespace p2p
}  // namespace hora
