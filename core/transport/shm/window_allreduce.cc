#include "core/transport/shm/window_allreduce.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "core/collectives/ring.h"
#include "core/common/reduce.h"

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

  // Copies n bytes of src over bytes [from, from + n); a piece without data keeps nothing.
  void scatter(size_t from, const uint8_t* src, size_t n) const {
    walk(from, n, [&](const BufferPiece& p, size_t at, size_t done, size_t len) {
      if (p.data != nullptr) std::memcpy(static_cast<uint8_t*>(p.data) + at, src + done, len);
    });
  }

 private:
  template <typename Visit>
  void walk(size_t from, size_t n, Visit&& visit) const {
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
      : links_(links),
        p_(links.peers()),
        s_(p_.segment),
        dtype_(dtype),
        op_(op),
        rankOrder_(rankOrder),
        es_(dtypeSize(dtype)),
        me_(p_.worldRank),
        n_(p_.worldSize) {
    for (int r = 0; r < n_; ++r) {
      if (r != me_) others_.push_back(r);
    }
  }

  // Part k of `elements` elements starting at element `first` of the pieces.
  void part(const Pieces& pieces, size_t first, size_t elements) {
    const uint32_t k = ++p_.windowPart;
    const int half = static_cast<int>(k & 1);
    const size_t bytes = elements * es_;
    pieces.gather(first * es_, s_.window(me_, half), bytes);
    publishAndWait(2 * k - 1, "stage its part in its window");

    std::vector<size_t> offsets, sizes;
    collectives::splitEvenly(elements, n_, es_, &offsets, &sizes);
    foldSlice(half, offsets[me_], sizes[me_]);
    publishAndWait(2 * k, "reduce its slice in its window");

    for (int r = 0; r < n_; ++r) {
      if (sizes[r] > 0)
        pieces.scatter(first * es_ + offsets[r], s_.window(r, half) + offsets[r], sizes[r]);
    }
  }

 private:
  // Reduces bytes [off, off + len) of every rank's half into this rank's half.
  void foldSlice(int half, size_t off, size_t len) {
    uint8_t* mine = s_.window(me_, half) + off;
    // Rank 0's data first: in place when it is this rank's own (or the order does not matter),
    // else through a chunk of scratch that starts as rank 0's.
    const bool inPlace = me_ == 0 || !rankOrder_;
    uint8_t* scratch =
        inPlace ? nullptr : links_.scratch(collectives::kScratchRecv, kFoldChunkBytes);
    const size_t chunk = kFoldChunkBytes / es_ * es_;
    for (size_t at = 0; at < len; at += chunk) {
      const size_t bytes = std::min(chunk, len - at);
      const size_t count = bytes / es_;
      if (inPlace) {
        for (int r : others_)
          reduceInto(mine + at, s_.window(r, half) + off + at, count, dtype_, op_);
        continue;
      }
      std::memcpy(scratch, s_.window(0, half) + off + at, bytes);
      for (int r = 1; r < n_; ++r) {
        reduceInto(scratch, s_.window(r, half) + off + at, count, dtype_, op_);
      }
      std::memcpy(mine + at, scratch, bytes);
    }
  }

  bool reached(int r, uint32_t step) const {
    return static_cast<int32_t>(s_.rank(r).window.step.load(std::memory_order_acquire) - step) >= 0;
  }

  // Publishes this rank's step, then waits until every other rank reached it. A rank that reached
  // it and then left (the job ending) does not fail the wait.
  void publishAndWait(uint32_t step, const char* what) {
    s_.rank(me_).window.step.store(step, std::memory_order_release);
    for (int r : others_) ring(p_.doorbell(r));
    auto ready = [&] {
      for (int r : others_) {
        if (!reached(r, step)) return false;
      }
      return true;
    };
    auto missing = [&] {
      std::string out;
      for (int r : others_) {
        if (!reached(r, step)) out += (out.empty() ? "" : ", ") + std::to_string(p_.jobRank(r));
      }
      return "waiting for rank " + out + " to " + what;
    };
    links_.waitFor(ready, others_, missing, [&](int r) { return !reached(r, step); });
  }

  ShmLinks& links_;
  ShmPeers& p_;
  const Segment& s_;
  DataType dtype_;
  ReduceOp op_;
  bool rankOrder_;
  size_t es_;
  int me_;
  int n_;
  std::vector<int> others_;
};

}  // namespace

void windowAllreduce(ShmLinks& links, const std::vector<BufferPiece>& pieces, size_t count,
                     DataType dtype, ReduceOp op, bool rankOrder) {
  Pieces all(pieces);
  WindowRun run(links, dtype, op, rankOrder);
  const size_t perPart = links.peers().segment.windowBytes() / 2 / dtypeSize(dtype);
  for (size_t first = 0; first < count; first += perPart) {
    run.part(all, first, std::min(perPart, count - first));
  }
}

}  // namespace shm
}  // namespace hora
