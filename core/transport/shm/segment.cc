#include "core/transport/shm/segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/common/errors.h"

namespace hora {
namespace shm {
namespace {

constexpr uint64_t kMagic = 0x484f52415348ull;  // "HORASH"

struct alignas(kLine) Header {
  uint64_t magic;
  uint64_t ranks;
  uint64_t ringBytes;
  uint64_t totalBytes;
  uint64_t controlRingBytes;
  uint64_t windowBytes;
  uint64_t arenaBytes;
};

[[noreturn]] void sysFail(const char* what) {
  throw IoError(std::string("shared memory: ") + what + " failed: " + std::strerror(errno));
}

// The size the layout comment (segment.h) promises.
static_assert(sizeof(RankBlock) == 1024 + 2 * AgreementBoard::kEagerBytes + 2 * kPayloadBlockBytes,
              "a rank's block is 1 KiB of lines, its rounds' eager payloads and its two payload "
              "blocks");

// Where the arena starts in the file: the first page after the fixed part.
size_t arenaOffset(size_t fixedBytes) { return roundUpToPage(fixedBytes); }

// Data rings exist for every ordered pair of distinct ranks; control rings only between rank 0 and
// each other rank, one per direction.
size_t pairs(int ranks) { return static_cast<size_t>(ranks) * (ranks - 1); }
size_t controlRings(int ranks) { return 2 * static_cast<size_t>(ranks - 1); }

}  // namespace

size_t Segment::bytesFor(int ranks, size_t ringBytes, size_t windowBytes) {
  return sizeof(Header) + sizeof(RankBlock) * ranks + sizeof(RingControl) * pairs(ranks) +
         ringBytes * pairs(ranks) +
         (sizeof(RingControl) + kControlRingBytes) * controlRings(ranks) + windowBytes * ranks;
}

void copyIntoRing(uint8_t* ring, size_t cap, uint64_t pos, const uint8_t* src, size_t n) {
  // Positions count bytes since the start of the stream, so the offset in the ring is taken modulo
  // its capacity and a copy that crosses the end wraps to the start.
  size_t at = static_cast<size_t>(pos % cap), first = std::min(n, cap - at);
  std::memcpy(ring + at, src, first);
  if (first < n) std::memcpy(ring, src + first, n - first);
}

void copyOutOfRing(const uint8_t* ring, size_t cap, uint64_t pos, uint8_t* dst, size_t n) {
  size_t at = static_cast<size_t>(pos % cap), first = std::min(n, cap - at);
  std::memcpy(dst, ring + at, first);
  if (first < n) std::memcpy(dst + first, ring, n - first);
}

Segment& Segment::operator=(Segment&& o) noexcept {
  if (this != &o) {
    release();
    base_ = o.base_;
    bytes_ = o.bytes_;
    fd_ = o.fd_;
    ranks_ = o.ranks_;
    ringBytes_ = o.ringBytes_;
    windowBytes_ = o.windowBytes_;
    arenaBytes_ = o.arenaBytes_;
    arena_ = std::move(o.arena_);
    o.base_ = nullptr;
    o.fd_ = -1;
  }
  return *this;
}

Segment Segment::create(int ranks, size_t ringBytes, size_t windowBytes, size_t arenaBytes) {
  // Whole lines keep every ring and window on its own cache lines; halves of a window must be whole
  // lines too, hence multiples of 2 * kLine.
  HORA_CHECK(ranks >= 1 && ringBytes >= kLine && ringBytes % kLine == 0 &&
                 windowBytes % (2 * kLine) == 0 && arenaBytes % pageBytes() == 0,
             "bad segment shape");
  Segment s;
  s.bytes_ = bytesFor(ranks, ringBytes, windowBytes);
  s.fd_ = ::memfd_create("hora-shm", MFD_CLOEXEC);
  if (s.fd_ < 0) sysFail("memfd_create");
  // fallocate reserves every page now: a full tmpfs fails here (ENOSPC) rather than with SIGBUS
  // on first touch in the middle of a collective.
  if (::fallocate(s.fd_, 0, 0, static_cast<off_t>(s.bytes_)) != 0) sysFail("fallocate");
  // The arena's areas stay holes: their pages are reserved block by block (arena.h).
  if (arenaBytes > 0 &&
      ::ftruncate(s.fd_, static_cast<off_t>(arenaOffset(s.bytes_) + arenaBytes * ranks)) != 0) {
    sysFail("ftruncate");
  }
  // Only the fixed part is mapped here; MAP_POPULATE takes its page faults now rather than in the
  // first collective.
  void* p = ::mmap(nullptr, s.bytes_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, s.fd_, 0);
  if (p == MAP_FAILED) sysFail("mmap");
  s.base_ = static_cast<uint8_t*>(p);
  s.ranks_ = ranks;
  s.ringBytes_ = ringBytes;
  s.windowBytes_ = windowBytes;
  s.arenaBytes_ = arenaBytes;
  auto* h = reinterpret_cast<Header*>(s.base_);
  h->ranks = static_cast<uint64_t>(ranks);
  h->ringBytes = ringBytes;
  h->windowBytes = windowBytes;
  h->arenaBytes = arenaBytes;
  h->totalBytes = s.bytes_;
  h->controlRingBytes = kControlRingBytes;
  std::atomic_thread_fence(std::memory_order_release);
  // The magic goes in last, so a header that carries it is complete.
  h->magic = kMagic;
  return s;
}

Segment Segment::attach(int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) sysFail("fstat");
  if (static_cast<size_t>(st.st_size) < sizeof(Header)) {
    throw IoError("shared memory: the segment received from rank 0 is too small");
  }
  // The header says how much of the file is the fixed part (the rest is the arena, mapped apart).
  Header h;
  // Reading the header with pread before mapping anything means a malformed file is refused without
  // mapping a size taken on trust.
  if (::pread(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h))) sysFail("pread");
  const size_t fixed = h.totalBytes;
  // The header's sizes must agree with each other and with the file's real size before anything
  // is mapped from them.
  if (h.magic != kMagic || h.ranks < 1 || h.ranks > (1u << 16) ||
      h.controlRingBytes != kControlRingBytes || h.windowBytes % (2 * kLine) != 0 ||
      h.arenaBytes % pageBytes() != 0 ||
      bytesFor(static_cast<int>(h.ranks), h.ringBytes, h.windowBytes) != fixed ||
      static_cast<size_t>(st.st_size) !=
          (h.arenaBytes > 0 ? arenaOffset(fixed) + h.arenaBytes * h.ranks : fixed)) {
    throw IoError("shared memory: the segment received from rank 0 has an unknown layout");
  }
  Segment s;
  void* p = ::mmap(nullptr, fixed, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) sysFail("mmap");
  s.base_ = static_cast<uint8_t*>(p);
  s.bytes_ = fixed;
  s.ranks_ = static_cast<int>(h.ranks);
  s.ringBytes_ = h.ringBytes;
  s.windowBytes_ = h.windowBytes;
  s.arenaBytes_ = h.arenaBytes;
  return s;
}

void Segment::mapArena(int fd, int me) {
  if (arenaBytes_ == 0 || arena_) return;
  arena_ = SharedArena::map(fd, arenaOffset(bytes_), ranks_, me, arenaBytes_);
}

void Segment::closeFd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Segment::release() {
  if (base_) ::munmap(base_, bytes_);
  base_ = nullptr;
  arena_.reset();
  closeFd();
}

size_t Segment::pairIndex(int from, int to) const {
  HORA_CHECK(from != to && from >= 0 && to >= 0 && from < ranks_ && to < ranks_, "bad ring");
  // Each sender owns ranks - 1 consecutive rings; destinations above the sender shift down by one
  // because a rank has no ring to itself.
  return static_cast<size_t>(from) * (ranks_ - 1) + (to < from ? to : to - 1);
}

RankBlock& Segment::rank(int r) const {
  HORA_CHECK(r >= 0 && r < ranks_, "bad rank");
  return reinterpret_cast<RankBlock*>(base_ + sizeof(Header))[r];
}

RingControl& Segment::ringControl(int from, int to) const {
  auto* first = reinterpret_cast<RingControl*>(base_ + sizeof(Header) + sizeof(RankBlock) * ranks_);
  return first[pairIndex(from, to)];
}

uint8_t* Segment::ringData(int from, int to) const {
  uint8_t* first =
      base_ + sizeof(Header) + sizeof(RankBlock) * ranks_ + sizeof(RingControl) * pairs(ranks_);
  return first + ringBytes_ * pairIndex(from, to);
}

// Rank r > 0 has two control rings after the data rings: r -> 0 at 2(r-1), 0 -> r at 2(r-1)+1.
size_t Segment::controlIndex(int from, int to) const {
  HORA_CHECK(
      from != to && (from == 0 || to == 0) && from < ranks_ && to < ranks_ && from >= 0 && to >= 0,
      "bad control ring");
  return from == 0 ? 2 * static_cast<size_t>(to - 1) + 1 : 2 * static_cast<size_t>(from - 1);
}

uint8_t* Segment::controlBase() const {
  return base_ + sizeof(Header) + sizeof(RankBlock) * ranks_ +
         (sizeof(RingControl) + ringBytes_) * pairs(ranks_);
}

RingControl& Segment::controlRingControl(int from, int to) const {
  return reinterpret_cast<RingControl*>(controlBase())[controlIndex(from, to)];
}

uint8_t* Segment::controlRingData(int from, int to) const {
  return controlBase() + sizeof(RingControl) * controlRings(ranks_) +
         kControlRingBytes * controlIndex(from, to);
}

uint8_t* Segment::window(int r, int half) const {
  HORA_CHECK(r >= 0 && r < ranks_ && (half == 0 || half == 1) && windowBytes_ > 0, "bad window");
  uint8_t* first = controlBase() + (sizeof(RingControl) + kControlRingBytes) * controlRings(ranks_);
  return first + windowBytes_ * static_cast<size_t>(r) + windowBytes_ / 2 * half;
}

}  // namespace shm
}  // namespace hora
