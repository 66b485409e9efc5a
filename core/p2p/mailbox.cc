// Mailbox (contract in mailbox.h).
//
// Every message lives in messages_ from its header's arrival until a receive has it whole or it is
// dropped. Exactly one of these holds its destination at any time:
//   receive   matched to a receive: the payload goes into the receive's buffer;
//   owned     unexpected: the payload goes into a buffer of the message's own;
//   discard   consumed by a size mismatch, or cut off by a shutdown: the rest is read and dropped.
// An unexpected message is listed in unexpected_ (complete or not) until a receive takes it; the
// one a source is still sending is also arriving_[source].
//
// The I/O side writes payload bytes outside the lock, between beginChunk (which marks the message
// `reading`) and endChunk. Whoever changes a message's destination while it is still arriving (a
// post that claims it, withdraw, shutdown) first waits for `reading` to clear, so no chunk is ever
// written into a buffer that has just been handed back to its owner.
#include "core/p2p/mailbox.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "core/common/errors.h"

namespace hora {
namespace p2p {

struct ArrivedMessage {
  int source = -1;
  int64_t tag = 0;
  uint64_t bytes = 0;
  uint64_t order = 0;  // arrival order across every source
  uint64_t received = 0;
  Receive* receive = nullptr;
  std::unique_ptr<uint8_t[]> owned;
  uint64_t capacity = 0;  // of owned
  bool discard = false;
  bool reading = false;  // a chunk is being written into the destination
  bool watched = false;  // someone waits for that chunk to end
  bool complete() const { return received == bytes; }
};

int Receive::result() const {
  if (error_) std::rethrow_exception(error_);
  return from_;
}

Mailbox::Mailbox(int rank, int size)
    : rank_(rank), size_(size), arriving_(size, nullptr), gone_(size) {}

Mailbox::~Mailbox() = default;

std::string Mailbox::me() const { return "rank " + std::to_string(rank_); }

std::string Mailbox::describe(int source, int64_t tag) const {
  std::string from = source == kAnySource ? "any rank" : "rank " + std::to_string(source);
  return "from " + from + " with tag " + std::to_string(tag);
}

std::exception_ptr Mailbox::sizeMismatch(const Receive& r, int source, uint64_t bytes) const {
  return std::make_exception_ptr(InvalidArgument(
      me() + ": the message " + describe(source, r.tag_) + " has " + std::to_string(bytes) +
      " bytes but the receive buffer has " + std::to_string(r.bytes_) +
      " bytes; the message was consumed (receive into a buffer of the size that was sent)"));
}

std::exception_ptr Mailbox::sourceGone(const Receive& r) const {
  if (r.source_ == kAnySource) {
    return std::make_exception_ptr(
        IoError(me() +
                ": every other rank has closed its point-to-point connection, so the "
                "receive " +
                describe(r.source_, r.tag_) + " cannot complete"));
  }
  return std::make_exception_ptr(IoError(
      me() + ": " + gone_[r.source_] + ", so the receive " + describe(r.source_, r.tag_) +
      " cannot complete (did rank " + std::to_string(r.source_) + " exit or close its channel?)"));
}

bool Mailbox::everyPeerGone() const { return size_ > 1 && goneCount_ == size_ - 1; }

// ---- Lookups. Both indexes keep each list in order, so the oldest match is at a list's front.

Mailbox::Message* Mailbox::oldestUnexpected(int source, int64_t tag) const {
  if (source != kAnySource) {
    auto it = unexpected_.find({tag, source});
    return it == unexpected_.end() ? nullptr : it->second.front();
  }
  Message* oldest = nullptr;
  for (auto it = unexpected_.lower_bound({tag, INT_MIN}); it != unexpected_.end(); ++it) {
    if (it->first.first != tag) break;
    Message* m = it->second.front();
    if (oldest == nullptr || m->order < oldest->order) oldest = m;
  }
  return oldest;
}

Receive* Mailbox::oldestPosted(int source, int64_t tag) const {
  Receive* oldest = nullptr;
  for (int from : {source, kAnySource}) {
    auto it = posted_.find({tag, from});
    if (it == posted_.end()) continue;
    Receive* r = it->second.front();
    if (oldest == nullptr || r->order_ < oldest->order_) oldest = r;
  }
  return oldest;
}

// A message handed back by withdraw() is older than those that arrived since: insert in order.
void Mailbox::addUnexpected(Message* m) {
  auto& list = unexpected_[{m->tag, m->source}];
  auto at = std::upper_bound(list.begin(), list.end(), m, [](const Message* a, const Message* b) {
    return a->order < b->order;
  });
  list.insert(at, m);
}

void Mailbox::removeUnexpected(Message* m) {
  auto it = unexpected_.find({m->tag, m->source});
  HORA_CHECK(it != unexpected_.end(), "an unexpected message is not listed");
  auto& list = it->second;
  list.erase(std::find(list.begin(), list.end(), m));
  if (list.empty()) unexpected_.erase(it);
}

void Mailbox::removePosted(Receive& r) {
  auto it = posted_.find({r.tag_, r.source_});
  HORA_CHECK(it != posted_.end(), "a posted receive is not listed");
  auto& list = it->second;
  list.erase(std::find(list.begin(), list.end(), &r));
  if (list.empty()) posted_.erase(it);
}

void Mailbox::erase(Message* m) { messages_.erase(m->order); }

// Notified under the lock: once the owner sees Done it may destroy r, condition variable included.
void Mailbox::fail(Receive& r, std::exception_ptr error) {
  r.error_ = std::move(error);
  r.message_ = nullptr;
  r.state_ = Receive::State::Done;
  r.done_.notify_all();
}

void Mailbox::complete(Receive& r, int from) {
  r.from_ = from;
  r.message_ = nullptr;
  r.state_ = Receive::State::Done;
  r.done_.notify_all();
}

// One wait, not a loop: when the chunk ends the message may complete and be freed, so callers
// look their message up again after every wake-up.
void Mailbox::awaitChunkEnd(std::unique_lock<std::mutex>& lock, Message* m) {
  m->watched = true;
  chunkEnded_.wait(lock);
}

// ---- Receiving threads.

void Mailbox::post(Receive& r) {
  std::unique_ptr<Message> taken;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    HORA_CHECK(r.state_ == Receive::State::Idle, "a receive was posted twice");
    if (shutdown_) return fail(r, std::make_exception_ptr(ShutdownError(shutdownWhy_)));
    // A match still arriving may be mid-chunk; after waiting, look again: while the lock was
    // released it may have completed, been claimed by another receive, or been dropped.
    Message* m = oldestUnexpected(r.source_, r.tag_);
    while (m != nullptr && m->reading) {
      awaitChunkEnd(lock, m);
      m = oldestUnexpected(r.source_, r.tag_);
    }
    if (m == nullptr) {
      bool gone = r.source_ == kAnySource ? everyPeerGone() : !gone_[r.source_].empty();
      if (gone) return fail(r, sourceGone(r));
      r.state_ = Receive::State::Posted;
      r.order_ = nextPost_++;
      posted_[{r.tag_, r.source_}].push_back(&r);
      return;
    }
    removeUnexpected(m);
    if (m->bytes != r.bytes_) {
      fail(r, sizeMismatch(r, m->source, m->bytes));
      if (m->complete()) return erase(m);
      m->discard = true;  // the rest of it is read and dropped
      m->owned.reset();
      return;
    }
    if (!m->complete()) {
      // Claimed while arriving: what came so far moves to r's buffer, the rest goes straight there.
      if (m->received > 0) std::memcpy(r.data_, m->owned.get(), m->received);
      m->owned.reset();
      m->capacity = 0;
      m->receive = &r;
      r.message_ = m;
      r.state_ = Receive::State::Matched;
      return;
    }
    auto it = messages_.find(m->order);
    taken = std::move(it->second);
    messages_.erase(it);
  }
  // The message is complete and no longer listed: only this thread sees it, so the copy runs
  // without the lock. r is not posted, so no other thread reads it either.
  if (taken->bytes > 0) std::memcpy(r.data_, taken->owned.get(), taken->bytes);
  r.from_ = taken->source;
  r.state_ = Receive::State::Done;
}

bool Mailbox::test(Receive& r) {
  std::lock_guard<std::mutex> lock(mutex_);
  return r.state_ == Receive::State::Done;
}

bool Mailbox::wait(Receive& r, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto done = [&r] { return r.state_ == Receive::State::Done; };
  if (deadline == Clock::time_point::max()) {
    r.done_.wait(lock, done);
    return true;
  }
  return r.done_.wait_until(lock, deadline, done);
}

bool Mailbox::withdraw(Receive& r) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (r.state_ == Receive::State::Matched && r.message_->reading) {
    awaitChunkEnd(lock, r.message_);
  }
  switch (r.state_) {
    case Receive::State::Idle: return true;
    case Receive::State::Done: return false;
    case Receive::State::Posted:
      removePosted(r);
      r.state_ = Receive::State::Idle;
      return true;
    case Receive::State::Matched: break;
  }
  // Matched and still arriving (a complete message would have made r done): the part that came
  // moves into a buffer of the message's own and the message is unexpected again, in its place,
  // so the next receive for it gets the whole message.
  Message* m = r.message_;
  m->capacity = m->received;
  m->owned.reset(m->received > 0 ? new uint8_t[m->received] : nullptr);
  if (m->received > 0) std::memcpy(m->owned.get(), r.data_, m->received);
  m->receive = nullptr;
  addUnexpected(m);
  r.message_ = nullptr;
  r.state_ = Receive::State::Idle;
  return true;
}

// ---- The I/O side.

void Mailbox::arrive(int source, int64_t tag, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  HORA_CHECK(source >= 0 && source < size_, "a message from a rank outside the job");
  HORA_CHECK(arriving_[source] == nullptr, "a message arrived before the previous one ended");
  auto owner = std::make_unique<Message>();
  Message* m = owner.get();
  m->source = source;
  m->tag = tag;
  m->bytes = bytes;
  m->order = nextArrival_++;
  messages_[m->order] = std::move(owner);
  if (shutdown_) {
    m->discard = true;
  } else if (Receive* r = oldestPosted(source, tag)) {
    removePosted(*r);
    if (r->bytes_ == bytes) {
      m->receive = r;
      r->message_ = m;
      r->state_ = Receive::State::Matched;
    } else {
      fail(*r, sizeMismatch(*r, source, bytes));
      m->discard = true;
    }
  } else {
    addUnexpected(m);
  }
  if (!m->complete()) {
    arriving_[source] = m;
    return;
  }
  // An empty message is complete at its header.
  if (m->receive != nullptr) {
    complete(*m->receive, source);
    erase(m);
  } else if (m->discard) {
    erase(m);
  }
}

PayloadChunk Mailbox::beginChunk(int source) {
  std::lock_guard<std::mutex> lock(mutex_);
  Message* m = arriving_[source];
  HORA_CHECK(m != nullptr && !m->reading, "a payload chunk without a message to read");
  // After shutdown nothing more is written into any buffer (see shutdown()).
  if (shutdown_) detachForShutdown(m);
  m->reading = true;
  uint64_t left = m->bytes - m->received;
  PayloadChunk chunk;
  chunk.bytes = static_cast<size_t>(std::min<uint64_t>(left, SIZE_MAX));
  if (m->discard) return chunk;
  if (m->receive != nullptr) {
    chunk.data = m->receive->data_ + m->received;
    return chunk;
  }
  if (m->capacity == m->received) {
    // The buffer grows with what arrives: doubling keeps the copies to at most the message's size.
    uint64_t next = std::max<uint64_t>(m->capacity * 2, kFirstUnexpectedBytes);
    next = std::min(next, m->bytes);
    std::unique_ptr<uint8_t[]> bigger(new uint8_t[next]);
    if (m->received > 0) std::memcpy(bigger.get(), m->owned.get(), m->received);
    m->owned = std::move(bigger);
    m->capacity = next;
  }
  chunk.data = m->owned.get() + m->received;
  chunk.bytes = static_cast<size_t>(m->capacity - m->received);
  return chunk;
}

void Mailbox::endChunk(int source, size_t written) {
  std::lock_guard<std::mutex> lock(mutex_);
  Message* m = arriving_[source];
  HORA_CHECK(m != nullptr && m->reading, "a payload chunk ended that never began");
  HORA_CHECK(written <= m->bytes - m->received, "a chunk longer than its message");
  m->reading = false;
  m->received += written;
  if (m->watched) {
    m->watched = false;
    chunkEnded_.notify_all();
  }
  if (!m->complete()) return;
  arriving_[source] = nullptr;
  if (m->receive != nullptr) {
    complete(*m->receive, source);
    erase(m);
  } else if (m->discard) {
    erase(m);
  }
  // Otherwise a complete unexpected message: it stays listed until a receive takes it.
}

void Mailbox::peerLost(int source, const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  HORA_CHECK(source >= 0 && source < size_, "a lost peer outside the job");
  if (!gone_[source].empty()) return;
  gone_[source] = why.empty() ? "rank " + std::to_string(source) + "'s connection ended" : why;
  ++goneCount_;
  if (Message* m = arriving_[source]) {
    HORA_CHECK(!m->reading, "a peer was lost in the middle of a chunk");
    arriving_[source] = nullptr;
    if (m->receive != nullptr) {
      fail(*m->receive, std::make_exception_ptr(IoError(
                            me() + ": " + gone_[source] + " in the middle of the message " +
                            describe(source, m->tag) + " (" + std::to_string(m->received) + " of " +
                            std::to_string(m->bytes) + " bytes had arrived; did rank " +
                            std::to_string(source) + " exit or close its channel?)")));
    } else if (!m->discard) {
      removeUnexpected(m);  // cut short: no receive can ever have it whole
    }
    erase(m);
  }
  bool allGone = everyPeerGone();
  for (auto it = posted_.begin(); it != posted_.end();) {
    int from = it->first.second;
    if (from == source || (from == kAnySource && allGone)) {
      for (Receive* r : it->second) fail(*r, sourceGone(*r));
      it = posted_.erase(it);
    } else {
      ++it;
    }
  }
}

// Called with the lock held and m not being read.
void Mailbox::detachForShutdown(Message* m) {
  if (m->discard) return;
  if (m->receive != nullptr) {
    fail(*m->receive, std::make_exception_ptr(ShutdownError(shutdownWhy_)));
    m->receive = nullptr;
  } else {
    removeUnexpected(m);
    m->owned.reset();
  }
  m->discard = true;
}

void Mailbox::shutdown(const std::string& why) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (shutdown_) return;
  shutdown_ = true;
  shutdownWhy_ = why;
  auto error = std::make_exception_ptr(ShutdownError(why));
  for (auto& entry : posted_) {
    for (Receive* r : entry.second) fail(*r, error);
  }
  posted_.clear();
  // A chunk begun before shutdown_ was set may still be writing into a receive's buffer; chunks
  // begun after it are discarded (beginChunk). Wait for the first kind, then detach every message.
  for (int source = 0; source < size_; ++source) {
    while (arriving_[source] != nullptr && arriving_[source]->reading &&
           !arriving_[source]->discard) {
      awaitChunkEnd(lock, arriving_[source]);
    }
    if (arriving_[source] != nullptr) detachForShutdown(arriving_[source]);
  }
  // What remains listed is complete and unclaimed: nobody can receive it any more.
  for (auto& entry : unexpected_) {
    for (Message* m : entry.second) erase(m);
  }
  unexpected_.clear();
}

size_t Mailbox::unexpectedMessages() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const auto& entry : unexpected_) n += entry.second.size();
  return n;
}

}  // namespace p2p
}  // namespace hora
