// The shared-memory control channel. Frames are those of the TCP control channel
// (core/transport/control_frames.h), parsed and checked by the same code: a message reaches the
// coordinator only once every byte of it has arrived, and a frame that fails validation ends the
// channel (IoError naming the peer).
#include "core/transport/shm/control_channel.h"

#include <algorithm>
#include <chrono>

#include "core/common/errors.h"
#include "core/transport/control_frames.h"

namespace hora {
namespace shm {
namespace {

// An unbounded poll() still wakes up now and then, only to wait again.
// waitUntil() needs a finite timeout; an hour is long enough that the extra wake-ups cost nothing.
constexpr Millis kForeverSlice{3600 * 1000};

}  // namespace

ShmControlChannel::ShmControlChannel(std::shared_ptr<ShmPeers> peers, Millis opTimeout)
    : peers_(std::move(peers)),
      rank_(peers_->worldRank),
      size_(peers_->worldSize),
      opTimeout_(opTimeout) {
  // The control rings form a star around rank 0 (the TCP control connections form a tree).
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) inbound_.push_back({r, std::string()});
  } else {
    inbound_.push_back({0, std::string()});
  }
  // From here on a failure leaves the segment mapped, so this channel can still deliver this rank's
  // last messages, the reason for the failure among them.
  peers_->controlInUse = true;
}

// Closing tells the peers, after everything this rank sent (a failure's reason included): the
// flag is published after the rings' heads, so a peer that sees it also sees those bytes.
ShmControlChannel::~ShmControlChannel() {
  peers_->segment.rank(rank_).identity.controlClosed.store(1, std::memory_order_release);
  for (const Inbound& in : inbound_) ring(peers_->doorbell(in.rank));
}

std::string ShmControlChannel::controlGone(int peer) const {
  if (peers_->segment.rank(peer).identity.controlClosed.load(std::memory_order_acquire)) {
    return "rank " + std::to_string(peer) + " closed its end (it stopped or failed)";
  }
  return peers_->processExited(peer);
}

void ShmControlChannel::fail(int peer, const std::string& why) const {
  throw IoError("rank " + std::to_string(rank_) + ": control connection to rank " +
                std::to_string(peer) + " " + why);
}

// Names every gone peer: after a death the others close in turn, and the first one seen may be
// a survivor.
std::string ShmControlChannel::peersGone() const {
  std::string first, others;
  for (const Inbound& in : inbound_) {
    std::string why = controlGone(in.rank);
    if (why.empty()) continue;
    if (first.empty()) {
      first = "rank " + std::to_string(rank_) + ": control connection to rank " +
              std::to_string(in.rank) + " closed (" + why + ")";
    } else {
      others += "; " + why;
    }
  }
  if (first.empty()) return "";
  return first + (others.empty() ? "" : others + " too") +
         "; that rank probably exited or failed, see its log";
}

bool ShmControlChannel::anyInbound() const {
  const Segment& s = peers_->segment;
  for (const Inbound& in : inbound_) {
    RingControl& c = s.controlRingControl(in.rank, rank_);
    // Only this rank moves the tail of its inbound rings; head is acquired so that bytes it covers
    // are visible before they are read.
    if (c.head.load(std::memory_order_acquire) != c.tail.load(std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

void ShmControlChannel::wakeup() {
  // The counter is what poll() checks; the doorbell only ends its sleep. The segment stays mapped
  // while this channel lives (ShmPeers::controlInUse), so no lock guards the ring.
  wakeups_.fetch_add(1, std::memory_order_seq_cst);
  ring(peers_->doorbell(rank_));
}

void ShmControlChannel::readAvailable(Inbound& in, std::vector<Message>& out) {
  const Segment& s = peers_->segment;
  RingControl& c = s.controlRingControl(in.rank, rank_);
  const uint64_t tail = c.tail.load(std::memory_order_relaxed);
  const uint64_t head = c.head.load(std::memory_order_acquire);
  if (head != tail) {
    const size_t n = static_cast<size_t>(head - tail), old = in.partial.size();
    in.partial.resize(old + n);
    copyOutOfRing(s.controlRingData(in.rank, rank_), kControlRingBytes, tail,
                  reinterpret_cast<uint8_t*>(&in.partial[old]), n);
    // Everything available is taken at once: frames are parsed from in.partial, so the ring is
    // freed for the sender without waiting for a whole frame.
    c.tail.store(head, std::memory_order_release);
    // Wake the sender only when its send() waits for room: a needless wake-up would cost a
    // syscall here and a core there. Paired with the fence in send(): either it sees the new tail
    // or this sees its flag.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (c.writerWaiting.load(std::memory_order_relaxed) != 0) ring(peers_->doorbell(in.rank));
  }
  std::string bad = takeControlMessages(in.rank, in.partial, out);
  if (!bad.empty()) fail(in.rank, "sent a malformed frame: " + bad);
}

void ShmControlChannel::send(int to, const std::string& bytes) {
  if (bytes.size() > kMaxControlMessageBytes) {
    throw InvalidArgument("rank " + std::to_string(rank_) + ": control message of " +
                          std::to_string(bytes.size()) + " bytes exceeds the limit");
  }
  // Only the rings between rank 0 and the others exist (segment.h); any other pair would index
  // outside them.
  if (to == rank_ || to < 0 || to >= size_ || (rank_ != 0 && to != 0)) {
    throw InvalidArgument("rank " + std::to_string(rank_) + ": no control connection to rank " +
                          std::to_string(to) +
                          " (rank 0 talks to every rank, the others only to rank 0)");
  }
  const Segment& s = peers_->segment;
  RingControl& c = s.controlRingControl(rank_, to);
  uint8_t* data = s.controlRingData(rank_, to);
  const std::string frame = controlFrame(bytes);
  WaitPolicy policy = peers_->policy;
  // A send that waits for room is bounded by the op timeout, like the TCP channel's send().
  policy.timeout = opTimeout_;
  auto room = [&] {
    return c.head.load(std::memory_order_relaxed) - c.tail.load(std::memory_order_acquire) <
           kControlRingBytes;
  };
  size_t sent = 0;
  while (sent < frame.size()) {
    const uint64_t head = c.head.load(std::memory_order_relaxed);
    const uint64_t tail = c.tail.load(std::memory_order_acquire);
    const size_t n =
        std::min(frame.size() - sent, kControlRingBytes - static_cast<size_t>(head - tail));
    if (n > 0) {
      copyIntoRing(data, kControlRingBytes, head,
                   reinterpret_cast<const uint8_t*>(frame.data()) + sent, n);
      c.head.store(head + n, std::memory_order_release);
      ring(peers_->doorbell(to));
      sent += n;
      continue;
    }
    // The ring is full: wait for the peer to read, draining what it (or any peer) sends meanwhile,
    // or rank 0 and a rank both sending a large message would each wait for the other to read.
    // What arrives goes to stash_ and is handed out first by the next poll().
    // A peer that has closed will never read again: fail now rather than wait for room that cannot
    // come.
    std::string gone = controlGone(to);
    if (!gone.empty()) fail(to, "closed while sending (" + gone + ")");
    auto failed = [&]() -> std::string {
      std::string why = controlGone(to);
      if (why.empty()) return "";
      return "rank " + std::to_string(rank_) + ": control connection to rank " +
             std::to_string(to) + " closed while sending (" + why + ")";
    };
    bool moved;
    // The flag goes up before the wait checks for room, and the fence pairs with the one in
    // readAvailable(): a reader that frees room after this point sees the flag and rings.
    c.writerWaiting.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
    try {
      moved = waitUntil(
          peers_->doorbell(rank_), policy, [&] { return room() || anyInbound(); }, failed);
    } catch (...) {
      // The flag comes down however the wait ends, so the reader does not keep ringing for a send
      // that has given up.
      c.writerWaiting.store(0, std::memory_order_relaxed);
      throw;
    }
    c.writerWaiting.store(0, std::memory_order_relaxed);
    if (!moved) {
      throw TimeoutError("rank " + std::to_string(rank_) + ": rank " + std::to_string(to) +
                         " accepted no control data for " + std::to_string(opTimeout_.count()) +
                         " ms");
    }
    // Drained into stash_, not into a caller's vector: send() has none, and order is kept by poll()
    // handing stash_ out first.
    for (Inbound& in : inbound_) readAvailable(in, stash_);
  }
}

void ShmControlChannel::poll(std::vector<Message>& out, Millis timeout, Micros spin) {
  const size_t before = out.size();
  // Messages read while send() waited for room arrived before anything still in the rings.
  for (auto& m : stash_) out.push_back(std::move(m));
  stash_.clear();
  const bool forever = timeout.count() < 0;
  const auto deadline = forever ? Clock::time_point::max() : Clock::now() + timeout;
  WaitPolicy policy = peers_->policy;
  // The caller's spin budget replaces the yield stage; the pause stage stays as configured.
  policy.yield = spin;
  auto woken = [&] { return wakeups_.load(std::memory_order_acquire) != wakeupsSeen_; };
  // A round another rank published on the agreement board ends the wait like a message.
  auto ready = [&] { return woken() || anyInbound() || peers_->boardMoved(); };
  auto failed = [&] { return peersGone(); };
  for (;;) {
    for (Inbound& in : inbound_) readAvailable(in, out);
    if (woken()) {
      // Every wakeup() up to now is consumed by this return; several coalesce into one.
      wakeupsSeen_ = wakeups_.load(std::memory_order_acquire);
      return;
    }
    if (out.size() > before || peers_->boardMoved()) return;
    if (!forever) {
      const auto now = Clock::now();
      if (now >= deadline) return;
      // Rounded up: a remainder under a millisecond would otherwise become a zero timeout, and
      // the loop would spin until the deadline.
      policy.timeout = std::chrono::ceil<Millis>(deadline - now);
    } else {
      policy.timeout = kForeverSlice;
    }
    try {
      waitUntil(peers_->doorbell(rank_), policy, ready, failed);
    } catch (const IoError&) {
      // What a peer wrote before it closed comes first: its last message may say why.
      for (Inbound& in : inbound_) readAvailable(in, out);
      if (out.size() > before) return;
      throw;
    }
    // Only the start of the wait spins; a wake-up without a whole message sleeps again at once.
    policy.pause = Micros(0);
    policy.yield = Micros(0);
  }
}

}  // namespace shm
}  // namespace hora
