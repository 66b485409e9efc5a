#include "core/transport/shm/window_allreduce.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/collectives/ring.h"
#include "core/common/errors.h"
#include "core/common/reduce.h"
#include "core/transport/shm/window_steps.h"

namespace hora {
namespace shm {
namespace {

// A slice is folded a chunk at a time (every rank's chunk, then the next), so the running result
// stays in the first-level cache instead of streaming through memory once per rank.
constexpr size_t kFoldChunkBytes = 32 << 10;

// The pieces as one logical byte string: starts[i] is where piece i begins in it.
class Pieces {
 public:
  explicit Pieces(const std::vector<BufferPiece>& pieces) : pieces_(pieces) {
    size_t at = 0;
    for (const auto& p : pieces) {
      starts_.push_back(at);
      at += p.bytes;
    }
    starts_.push_back(at);
  }

  // Copies bytes [from, from + n) into dst; a piece without data reads as zeros.
  void gather(size_t from, uint8_t* dst, size_t n) const {
    walk(from, n, [&](const BufferPiece& p, size_t at, size_t done, size_t len) {
      if (p.data != nullptr) {
        std::memcpy(dst + done, static_cast<const uint8_t*>(p.data) + at, len);
      } else {
        std::memset(dst + done, 0, len);
      }
    });
  }

  // Where bytes [from, from + n) lie when they are one run of memory, else null.
  uint8_t* contiguous(size_t from, size_t n) const {
    uint8_t* start = nullptr;
    uint8_t* next = nullptr;
    bool broken = false;
    walk(from, n, [&](const BufferPiece& p, size_t at, size_t, size_t len) {
      auto* data = static_cast<uint8_t*>(p.data);
      if (data == nullptr || (start != nullptr && data + at != next)) broken = true;
      if (start == nullptr) start = data + at;
      next = data + at + len;
    });
    return broken ? nullptr : start;
  }

  // Copies n bytes of src over bytes [from, from + n); a piece without data keeps nothing.
  void scatter(size_t from, const uint8_t* src, size_t n) const {
    walk(from, n, [&](const BufferPiece& p, size_t at, size_t done, size_t len) {
      if (p.data != nullptr) std::memcpy(static_cast<uint8_t*>(p.data) + at, src + done, len);
    });
  }

 private:
  template <typename Visit>
  void walk(size_t from, size_t n, Visit&& visit) const {
    // The last piece that starts at or before `from`; empty pieces share a start with the next one
    // and are stepped over with a zero length.
    size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), from) -
                                   starts_.begin()) -
               1;
    size_t done = 0;
    for (; done < n && i < pieces_.size(); ++i) {
      size_t at = from + done - starts_[i];
      size_t len = std::min(pieces_[i].bytes - at, n - done);
      if (len > 0) visit(pieces_[i], at, done, len);
      done += len;
    }
  }

  const std::vector<BufferPiece>& pieces_;
  std::vector<size_t> starts_;
};

class WindowRun {
 public:
  WindowRun(ShmLinks& links, DataType dtype, ReduceOp op, bool rankOrder)
      : steps_(links),
        dtype_(dtype),
        op_(op),
        rankOrder_(rankOrder),
        es_(dtypeSize(dtype)),
        arena_(links.peers().segment.arena().get()),
        sources_(steps_.size()) {}

  size_t elementsPerPart() const { return steps_.halfBytes() / es_; }

  // The next part: `elements` elements starting at element `first` of the pieces.
  void part(const Pieces& pieces, size_t first, size_t elements) {
    // Part numbers come from the job-wide counter, so this part's half and steps follow on from any
    // earlier window collective (window_steps.h).
    const uint32_t k = steps_.nextPart();
    const int me = steps_.me();
    const size_t from = first * es_;
    std::vector<size_t> offsets, sizes;
    collectives::splitEvenly(elements, steps_.size(), es_, &offsets, &sizes);
    // This rank's own slice is reduced where it lies when it is one run of its pieces: it then
    // needs no copy into the window and none back.
    uint8_t* own = pieces.contiguous(from + offsets[me], sizes[me]);
    stage(pieces, k, from, elements * es_, own != nullptr ? offsets[me] : 0,
          own != nullptr ? sizes[me] : 0);
    steps_.publishAndWait(2 * k - 1, "stage its part in its window");
    // Read only after the wait above: a rank publishes its source before its staging step, and that
    // step's acquire makes the source visible here.
    for (int r = 0; r < steps_.size(); ++r) sources_[r] = source(r, k, elements * es_);

    foldSlice(k, own, offsets[me], sizes[me]);
    // Every slice must be reduced before anyone copies results out; the same wait also tells each
    // rank that nobody reads its part any more.
    steps_.publishAndWait(2 * k, "reduce its slice in its window");

    for (int r = 0; r < steps_.size(); ++r) {
      if (sizes[r] > 0 && !(r == me && own != nullptr)) {
        pieces.scatter(from + offsets[r], steps_.half(r, k) + offsets[r], sizes[r]);
      }
    }
  }

 private:
  // Publishes where this rank's part k is: in its arena area when the part is one run there,
  // else copied into its half, all but bytes [skipFrom, skipFrom + skip) of the part (the slice
  // this rank folds where it lies, which no other rank reads).
  void stage(const Pieces& pieces, uint32_t k, size_t from, size_t bytes, size_t skipFrom,
             size_t skip) {
    const uint8_t* run = arena_ != nullptr ? pieces.contiguous(from, bytes) : nullptr;
    const int64_t at = run != nullptr ? arena_->offsetOf(run, bytes) : -1;
    WindowLine& line = steps_.links().peers().segment.rank(steps_.me()).window;
    // Relaxed suffices: the release store of step 2k - 1 in publishAndWait() comes after it and
    // publishes it. Offsets are stored plus one so that 0 can mean "in the window".
    line.source[k & 1].store(at >= 0 ? static_cast<uint64_t>(at) + 1 : 0,
                             std::memory_order_relaxed);
    if (at < 0) {
      uint8_t* half = steps_.half(steps_.me(), k);
      pieces.gather(from, half, skipFrom);
      const size_t rest = skipFrom + skip;
      pieces.gather(from + rest, half + rest, bytes - rest);
    }
    if (arena_ != nullptr) arena_->countPart(at >= 0);
  }

  // Where rank r's part k is (read after r published step 2k - 1).
  const uint8_t* source(int r, uint32_t k, size_t bytes) {
    const Segment& s = steps_.links().peers().segment;
    const uint64_t at = s.rank(r).window.source[k & 1].load(std::memory_order_relaxed);
    if (at == 0) return steps_.half(r, k);
    // The offset was written by another process; it is checked against the arena's bounds before
    // any byte is read through it.
    const uint8_t* p = arena_ != nullptr ? arena_->at(at - 1, bytes) : nullptr;
    if (p == nullptr) {
      throw IoError("rank " + std::to_string(steps_.links().peers().jobRank(r)) +
                    " published a window part outside the shared arena");
    }
    return p;
  }

  // Reduces bytes [off, off + len) of every rank's part into this rank's half, for the others to
  // copy out. `own`, when given, is this rank's slice where it lies in its pieces (not staged):
  // the fold reads this rank's data there and leaves the result there too.
  void foldSlice(uint32_t k, uint8_t* own, size_t off, size_t len) {
    const int me = steps_.me();
    uint8_t* mine = steps_.half(me, k) + off;
    auto data = [&](int r) -> const uint8_t* {
      return r == me && own != nullptr ? own : sources_[r] + off;
    };
    // Rank 0's data first: in place when it is this rank's own (or the order does not matter),
    // else through a chunk of scratch that starts as rank 0's.
    // Folding into this rank's own data starts the fold with its own values; that equals rank order
    // only for rank 0, so the others use scratch when order matters.
    const bool inPlace = me == 0 || !rankOrder_;
    uint8_t* into = own != nullptr ? own : mine;  // where an in-place fold runs
    uint8_t* scratch =
        inPlace ? nullptr : steps_.links().scratch(collectives::kScratchRecv, kFoldChunkBytes);
    // Whole elements per chunk, so no element is split between two reductions.
    const size_t chunk = kFoldChunkBytes / es_ * es_;
    for (size_t at = 0; at < len; at += chunk) {
      const size_t bytes = std::min(chunk, len - at);
      const size_t count = bytes / es_;
      if (inPlace) {
        if (data(me) != into) std::memcpy(into + at, data(me) + at, bytes);
        for (int r : steps_.others()) reduceInto(into + at, data(r) + at, count, dtype_, op_);
        // The other ranks copy this slice's result from this rank's half, so a result folded in the
        // own buffer is copied there too.
        if (into != mine) std::memcpy(mine + at, into + at, bytes);
        continue;
      }
      std::memcpy(scratch, data(0) + at, bytes);
      for (int r = 1; r < steps_.size(); ++r) {
        reduceInto(scratch, data(r) + at, count, dtype_, op_);
      }
      std::memcpy(mine + at, scratch, bytes);
      if (own != nullptr) std::memcpy(own + at, scratch, bytes);
    }
  }

  WindowSteps steps_;
  DataType dtype_;
  ReduceOp op_;
  bool rankOrder_;
  size_t es_;
  SharedArena* arena_;                   // the job's arena, or null
  std::vector<const uint8_t*> sources_;  // by rank: where its current part is
};

}  // namespace

void windowAllreduce(ShmLinks& links, const std::vector<BufferPiece>& pieces, size_t count,
                     DataType dtype, ReduceOp op, bool rankOrder) {
  Pieces all(pieces);
  WindowRun run(links, dtype, op, rankOrder);
  // Parts are whole elements of at most one half; a part always fits whichever half it lands in.
  const size_t perPart = run.elementsPerPart();
  for (size_t first = 0; first < count; first += perPart) {
    run.part(all, first, std::min(perPart, count - first));
  }
}

}  // namespace shm
}  // namespace hora
