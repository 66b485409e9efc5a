#pragma once
// Segment: the one shared-memory region of a job's ranks on one host, and its layout.
//
// The region is an anonymous memfd (no name in /dev/shm or anywhere else), created by rank 0 and
// handed to the other ranks as a file descriptor (setup.h). Every process closes the descriptor as
// soon as it has mapped the region, so the memory lives exactly as long as some rank still maps
// it: it is gone when the last rank exits, however it exits (kill -9 included), and a rank that
// fails unmaps it at once.
//
// Layout (all cache-line aligned, nothing shared between writers on one line):
//   header | per rank: identity line, doorbell line, two small-payload lines, window line,
//   agreement line, two agreement rounds (with their eager payloads) and two payload blocks |
//   per ordered pair (s -> d, s != d): ring control (head line, tail line) | ring data |
//   per rank r > 0, both directions (r -> 0, 0 -> r): control ring control | control ring data |
//   per rank: window (two halves) |
//   (page-aligned, in the same file but mapped on its own: arena.h) per rank: arena area
// The data rings belong to the collectives; the control rings carry only negotiation messages
// (control_channel.h), so a collective never reads one by mistake. A rank's window holds the
// data of an allreduce that its peers reduce in place (window_allreduce.h). The size is fixed when
// the job starts: 64 B + 25 KiB per rank + (128 B + ringBytes) per ordered pair + 2 x (128 B +
// kControlRingBytes) per rank other than 0 + windowBytes per rank, whatever the tensors the job
// later moves. The arena's areas (arenaBytes per rank) are holes in the file until a rank
// allocates a block there.
//
// Thread safety: the fields are atomics (or bytes published by an atomic release store), so any
// thread of any rank may read them; each is written only by the rank the comment names.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/collectives/algorithm_table.h"
#include "core/transport/agreement_board.h"
#include "core/transport/shm/arena.h"

namespace hora {
namespace shm {

constexpr size_t kLine = 64;
// Bytes of the small payload one rank publishes beside its sequence number (one line minus seq).
constexpr size_t kLinePayloadBytes = kLine - 8;
// Bytes of each of a rank's two payload blocks: the largest payload it publishes beside its line's
// sequence number (SharedPayload in the algorithm table).
constexpr size_t kPayloadBlockBytes = collectives::kSharedPayloadMaxBytes;
// Bytes of each control ring: a batch of negotiation messages for a few hundred tensors fits;
// a larger message passes in pieces.
constexpr size_t kControlRingBytes = 256 << 10;

struct alignas(kLine) RankLine {
  std::atomic<int32_t> pid;    // written by the rank when it attaches; 0 before
  std::atomic<uint32_t> gone;  // set by the rank when it leaves or fails: its peers stop waiting
  // Set by the rank when its control channel closes (control_channel.h): a rank whose collective
  // failed (gone) still sends the others its reason before that.
  std::atomic<uint32_t> controlClosed;
};
struct alignas(kLine) Doorbell {
  std::atomic<uint32_t> bell;      // bumped by any rank that changed something this rank awaits
  std::atomic<uint32_t> sleepers;  // threads of this rank blocked in FUTEX_WAIT on bell
};
// The rank's small-payload line: seq is written by the rank (release) after payload[seq & 1].
struct alignas(kLine) PayloadLine {
  std::atomic<uint32_t> seq;
  uint32_t bytes;
  uint8_t payload[kLinePayloadBytes];
};
struct alignas(kLine) SpareLine {
  uint8_t payload[kLine];
};
// The rank's progress through window allreduces (window_allreduce.h): 2k - 1 once it staged part
// k in its window (or published where in its arena area part k lies: source[k & 1] is that
// offset + 1, 0 when the part is in the window), 2k once it reduced its slice of part k there.
struct alignas(kLine) WindowLine {
  std::atomic<uint32_t> step;
  std::atomic<uint64_t> source[2];
};
// The rank's rounds of local agreement (core/transport/agreement_board.h): round is written
// (release) after rounds[round & 1].
struct alignas(kLine) AgreementLine {
  std::atomic<uint32_t> round;
};
struct alignas(kLine) AgreementRound {
  uint64_t applied;
  uint64_t joined;
  uint64_t ready[AgreementBoard::kWords];
  uint64_t handedOver[AgreementBoard::kWords];
  uint64_t eagerSlot;
  uint64_t eagerBytes;
  uint8_t eager[AgreementBoard::kEagerBytes];
};
struct RankBlock {
  RankLine identity;
  Doorbell doorbell;
  PayloadLine line;  // parity 0 payload and the sequence number
  SpareLine spare;   // parity 1 payload
  WindowLine window;
  AgreementLine agreement;
  AgreementRound rounds[2];
  // Payloads too large for a line, by parity, published by line.seq all the same.
  alignas(kLine) uint8_t payloads[2][kPayloadBlockBytes];
};
// A single-producer single-consumer byte ring: head counts bytes written (by the sender), tail
// bytes consumed (by the receiver); both only grow. writerWaiting (control rings only) is set by
// the sender while it waits for room, so that the receiver wakes it only then.
struct alignas(kLine) RingControl {
  alignas(kLine) std::atomic<uint64_t> head;
  std::atomic<uint32_t> writerWaiting;
  alignas(kLine) std::atomic<uint64_t> tail;
};

// Copies n bytes into (or out of) a ring of `cap` bytes starting at stream position pos (the
// caller has checked that they fit, or are there).
void copyIntoRing(uint8_t* ring, size_t cap, uint64_t pos, const uint8_t* src, size_t n);
void copyOutOfRing(const uint8_t* ring, size_t cap, uint64_t pos, uint8_t* dst, size_t n);

class Segment {
 public:
  // Creates and maps a zeroed region for `ranks` ranks (memfd_create, fallocate, prefaulted).
  // windowBytes: each rank's window, 0 or a multiple of 128; arenaBytes: each rank's arena area,
  // 0 (none) or a multiple of the page size. Throws IoError saying which system call failed (no
  // memfd, no memory, ...).
  static Segment create(int ranks, size_t ringBytes, size_t windowBytes = 0, size_t arenaBytes = 0);
  // Maps the region behind fd (received from rank 0) and checks its header. Does not take fd.
  static Segment attach(int fd);
  static size_t bytesFor(int ranks, size_t ringBytes, size_t windowBytes = 0);

  Segment() = default;
  Segment(Segment&& o) noexcept { *this = std::move(o); }
  Segment& operator=(Segment&& o) noexcept;
  ~Segment() { release(); }

  bool mapped() const { return base_ != nullptr; }
  int fd() const { return fd_; }
  // Maps the arena (when the segment has one) from fd, the segment's descriptor, with area `me`
  // as this rank's.
  void mapArena(int fd, int me);
  // The arena, or null. It stays mapped after release() while blocks of it are in use.
  const std::shared_ptr<SharedArena>& arena() const { return arena_; }
  void closeFd();  // the mapping stays
  void release();  // unmaps and closes

  int ranks() const { return ranks_; }
  size_t ringBytes() const { return ringBytes_; }
  size_t windowBytes() const { return windowBytes_; }
  size_t totalBytes() const { return bytes_; }
  RankBlock& rank(int r) const;
  RingControl& ringControl(int from, int to) const;
  uint8_t* ringData(int from, int to) const;
  // The control rings: one of from, to is rank 0, the other is not.
  RingControl& controlRingControl(int from, int to) const;
  uint8_t* controlRingData(int from, int to) const;
  // Half `half` (0 or 1) of rank r's window: windowBytes() / 2 bytes.
  uint8_t* window(int r, int half) const;

 private:
  size_t pairIndex(int from, int to) const;
  size_t controlIndex(int from, int to) const;
  uint8_t* controlBase() const;

  uint8_t* base_ = nullptr;
  size_t bytes_ = 0;
  int fd_ = -1;
  int ranks_ = 0;
  size_t ringBytes_ = 0;
  size_t windowBytes_ = 0;
  size_t arenaBytes_ = 0;
  std::shared_ptr<SharedArena> arena_;
};

}  // namespace shm
}  // namespace hora
