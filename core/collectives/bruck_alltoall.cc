// Bruck alltoallv: every rank's blocks reach their destinations in ceil(log2 N) rounds, each with
// one peer to send to and one to receive from, so a rank uses 2 ceil(log2 N) links instead of
// the pairwise exchange's N - 1. The price is bandwidth: a block crosses one link per set bit of
// the distance to its destination, about log2(N) / 2 links on average.
//
// Block j of a rank is the one for the rank j places after it. In the round of distance d (a
// power of two), every rank sends the blocks whose index has bit d set to the rank d places after
// it, and takes the same indices from the rank d places before. A block from rank s to rank
// s + j thus walks the set bits of j and arrives at index j. Sizes differ per block, so each
// round first sends the sizes of the blocks it carries, then the blocks.
#include <cstring>
#include <string>
#include <vector>

#include "core/collectives/algorithms.h"
#include "core/collectives/ring.h"
#include "core/common/errors.h"

namespace hora {
namespace collectives {
namespace {

using Block = std::vector<uint8_t>;

// One round: `blocks` at the indices with bit `d` set go to rank + d, and are replaced by what
// rank - d held at the same indices.
void bruckRound(Links& links, std::vector<Block>& blocks, int d) {
  const int n = links.size(), r = links.rank();
  const int to = wrapRank(r + d, n), from = wrapRank(r - d, n);
  std::vector<int> moved;
  for (int j = 1; j < n; ++j) {
    if (j & d) moved.push_back(j);
  }
  std::vector<uint64_t> sendSizes, recvSizes(moved.size());
  Block out;
  for (int j : moved) {
    sendSizes.push_back(blocks[j].size());
    out.insert(out.end(), blocks[j].begin(), blocks[j].end());
  }
  const size_t tableBytes = moved.size() * sizeof(uint64_t);
  Transfer sizes[2] = {{to, true, sendSizes.data(), tableBytes},
                       {from, false, recvSizes.data(), tableBytes}};
  runTransfers(links, sizes, 2);
  size_t total = 0;
  for (uint64_t s : recvSizes) total += s;
  Block in(total);
  Transfer data[2] = {{to, true, out.data(), out.size()}, {from, false, in.data(), in.size()}};
  runTransfers(links, data, 2);
  size_t at = 0;
  for (size_t i = 0; i < moved.size(); ++i) {
    Block& b = blocks[moved[i]];
    b.assign(in.begin() + static_cast<std::ptrdiff_t>(at),
             in.begin() + static_cast<std::ptrdiff_t>(at + recvSizes[i]));
    at += recvSizes[i];
  }
}

}  // namespace

void alltoallvBruck(Links& links, const void* in, const std::vector<size_t>& sendBytes, void* out,
                    const std::vector<size_t>& recvBytes) {
  const int n = links.size(), r = links.rank();
  const std::vector<size_t> sendAt = startsOf(sendBytes), recvAt = startsOf(recvBytes);
  const auto* src = static_cast<const uint8_t*>(in);
  std::vector<Block> blocks(n);
  for (int j = 0; j < n; ++j) {
    const int dest = wrapRank(r + j, n);
    blocks[j].assign(src + sendAt[dest], src + sendAt[dest] + sendBytes[dest]);
  }
  for (int d = 1; d < n; d *= 2) bruckRound(links, blocks, d);
  // Block j now holds what rank r - j sent this rank.
  auto* dst = static_cast<uint8_t*>(out);
  for (int j = 0; j < n; ++j) {
    const int source = wrapRank(r - j, n);
    if (blocks[j].size() != recvBytes[source]) {
      throw IoError("alltoallv: rank " + std::to_string(source) + " sent " +
                    std::to_string(blocks[j].size()) + " bytes to rank " + std::to_string(r) +
                    ", which expected " + std::to_string(recvBytes[source]));
    }
    if (!blocks[j].empty()) std::memcpy(dst + recvAt[source], blocks[j].data(), blocks[j].size());
  }
}

}  // namespace collectives
}  // namespace hora
