#pragma once
// Test fixture: the rank-ordered allreduces (rank_ordered.cc, chain_ordered.cc, bruck_ordered.cc)
// run directly over bounded in-memory pipes (thread_links.h) on inputs whose floating-point folds
// give other bits in another order, so that two of them can be compared bit for bit.
//
//   expectRankOrderedBits(collectives::allreduceChainOrdered, n, count, dtype, op, 1000);
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/collectives/algorithms.h"
#include "core/common/reduce.h"
#include "tests/cpp/thread_links.h"

namespace hora {
namespace test {

using Bytes = std::vector<uint8_t>;
using AllreduceFn = void (*)(collectives::Links&, void*, size_t, DataType, ReduceOp);

// Values whose float sums and products round differently in another order: mixed signs and
// magnitudes for Sum, factors near one for Product (no overflow to inf in float16).
inline Bytes valuesOf(int rank, size_t count, DataType dtype, ReduceOp op) {
  std::mt19937 gen(1000u + static_cast<unsigned>(rank) * 7919u + static_cast<unsigned>(count));
  std::uniform_real_distribution<double> unit(-1.0, 1.0);
  std::uniform_int_distribution<int> scale(-6, 6);
  Bytes out(count * dtypeSize(dtype));
  for (size_t i = 0; i < count; ++i) {
    double v = op == ReduceOp::Product ? 1.0 + 0.5 * unit(gen) : std::ldexp(unit(gen), scale(gen));
    uint8_t* at = out.data() + i * dtypeSize(dtype);
    if (dtype == DataType::Float64) {
      std::memcpy(at, &v, 8);
    } else if (dtype == DataType::Float32) {
      float f = static_cast<float>(v);
      std::memcpy(at, &f, 4);
    } else {
      uint16_t h = dtype == DataType::Float16 ? floatToHalf(static_cast<float>(v))
                                              : floatToBfloat16(static_cast<float>(v));
      std::memcpy(at, &h, 2);
    }
  }
  return out;
}

// Every rank's result of `fn`, with pipes of `pipeBytes`; fails the test on any rank's error.
inline std::vector<Bytes> run(AllreduceFn fn, int n, size_t count, DataType dtype, ReduceOp op,
                              size_t pipeBytes, std::vector<std::set<int>>* peers = nullptr) {
  ThreadNet net(n, pipeBytes);
  std::vector<Bytes> bufs(n);
  if (peers) peers->assign(n, {});
  auto errors = runRanks(n, [&](int r) {
    ThreadLinks links(net, r);
    bufs[r] = valuesOf(r, count, dtype, op);
    fn(links, bufs[r].data(), count, dtype, op);
    if (peers) (*peers)[r] = links.peers();
  });
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
  return bufs;
}

inline std::string where(int n, size_t count, DataType dtype, ReduceOp op) {
  return "n=" + std::to_string(n) + " count=" + std::to_string(count) + " " + dtypeName(dtype) +
         " op=" + std::to_string(static_cast<int>(op));
}

// Runs `fn` (pipes of `pipeBytes`) and the rank-ordered allreduce on the same inputs, and fails
// the test when any rank's bits differ. peers: as in run(), for `fn`.
inline void expectRankOrderedBits(AllreduceFn fn, int n, size_t count, DataType dtype, ReduceOp op,
                                  size_t pipeBytes, std::vector<std::set<int>>* peers = nullptr) {
  const std::string at = where(n, count, dtype, op);
  auto want = run(collectives::allreduceRankOrdered, n, count, dtype, op, 4096);
  auto got = run(fn, n, count, dtype, op, pipeBytes, peers);
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(got[r].size(), want[r].size()) << at;
    ASSERT_TRUE(got[r] == want[r]) << at << ": rank " << r << " differs";
  }
}

}  // namespace test
}  // namespace hora
