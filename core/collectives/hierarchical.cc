// The hierarchical allreduce (local reduce-scatter, cross allreduce, local allgather) and the
// grouping of ranks into hosts it runs on.
#include "core/collectives/hierarchical.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/collectives/ring.h"
#include "core/common/reduce.h"

namespace hora {
namespace collectives {

HostGroups groupHosts(const std::vector<RankPlace>& places) {
  HostGroups g;
  const int size = static_cast<int>(places.size());
  std::map<int, std::vector<int>> byHost;
  for (int r = 0; r < size; ++r) byHost[places[r].host].push_back(r);
  if (byHost.size() < 2) {
    g.whyNot = "every rank runs on one host";
    return g;
  }
  for (int r = 1; r < size; ++r) {
    if (places[r].hostRanks != places[0].hostRanks) {
      g.whyNot = "hosts run different numbers of ranks (rank 0's runs " +
                 std::to_string(places[0].hostRanks) + ", rank " + std::to_string(r) + "'s runs " +
                 std::to_string(places[r].hostRanks) + ")";
      return g;
    }
  }
  for (int r = 0; r < size; ++r) {
    const RankPlace& p = places[r];
    if (p.hostCount != static_cast<int>(byHost.size()) ||
        p.hostRanks != static_cast<int>(byHost.at(p.host).size())) {
      g.whyNot = "rank " + std::to_string(r) +
                 "'s local and cross sizes do not match the other ranks' cross ranks";
      return g;
    }
  }
  for (auto& entry : byHost) g.hosts.push_back(entry.second);
  return g;
}

HostLayout layoutFor(const HostGroups& groups, int worldRank) {
  HostLayout l;
  l.hosts = groups.hosts;
  for (size_t h = 0; h < l.hosts.size(); ++h) {
    for (size_t i = 0; i < l.hosts[h].size(); ++i) {
      if (l.hosts[h][i] == worldRank) {
        l.host = static_cast<int>(h);
        l.index = static_cast<int>(i);
      }
    }
  }
  std::vector<std::pair<int, int>> cross;  // (world rank, host), sorted by world rank
  for (size_t h = 0; h < l.hosts.size(); ++h) {
    cross.emplace_back(l.hosts[h][l.index], static_cast<int>(h));
  }
  std::sort(cross.begin(), cross.end());
  for (const auto& c : cross) l.crossHosts.push_back(c.second);
  return l;
}

void allreduceHierarchical(Group& local, Group& cross, void* buf, size_t count, DataType dtype,
                           ReduceOp op, std::vector<uint8_t>& scratch) {
  if (count == 0) return;
  const int n = local.size(), me = local.rank();
  const size_t es = dtypeSize(dtype);
  uint8_t* base = static_cast<uint8_t*>(buf);
  std::vector<size_t> offsets, bytes;
  splitEvenly(count, n, es, &offsets, &bytes);
  uint8_t* slice = base + offsets[me];
  const size_t sliceBytes = bytes[me];

  if (n > 1) {
    // Reduce-scatter: slice j goes to local rank j; this rank receives every host rank's copy of
    // its slice and folds them in rank order, so an element's result does not depend on where
    // it sits in the buffer (fused or not).
    scratch.resize(sliceBytes * n);
    std::vector<size_t> recvBytes(n, sliceBytes);
    local.alltoallv(base, bytes, scratch.data(), recvBytes);
    if (sliceBytes > 0) {
      std::memcpy(slice, scratch.data(), sliceBytes);
      for (int j = 1; j < n; ++j) {
        reduceInto(slice, scratch.data() + j * sliceBytes, sliceBytes / es, dtype, op);
      }
    }
  }
  // Every cross group holds the same slice on every host; each group reduces it at once.
  cross.allreduce(slice, sliceBytes / es, dtype, op);
  if (n > 1) local.allgatherv(slice, base, bytes);
}

namespace {

// The even split of every host's blocks (concatenated in its rank order) into one slice per
// local rank: offset and length of slice i of host h.
struct HostSlices {
  std::vector<size_t> hostBytes;
  std::vector<std::vector<size_t>> offset, bytes;
};

HostSlices sliceHosts(const HostLayout& l, const std::vector<size_t>& bytesPerRank) {
  HostSlices s;
  const int ranksPerHost = static_cast<int>(l.hosts[0].size());
  for (const auto& host : l.hosts) {
    size_t total = 0;
    for (int r : host) total += bytesPerRank[r];
    s.hostBytes.push_back(total);
    s.offset.emplace_back();
    s.bytes.emplace_back();
    splitEvenly(total, ranksPerHost, 1, &s.offset.back(), &s.bytes.back());
  }
  return s;
}

// Copies bytes [from, from + len) of host h's concatenated blocks to their places in out.
void placeHostRange(const HostLayout& l, int h, size_t from, size_t len, const uint8_t* src,
                    uint8_t* out, const std::vector<size_t>& worldOffset,
                    const std::vector<size_t>& bytesPerRank) {
  size_t at = 0;  // start of the current rank's block within the host's bytes
  for (int r : l.hosts[h]) {
    size_t b = bytesPerRank[r];
    size_t lo = std::max(from, at), hi = std::min(from + len, at + b);
    if (lo < hi) std::memcpy(out + worldOffset[r] + (lo - at), src + (lo - from), hi - lo);
    at += b;
  }
}

}  // namespace

void allgathervHierarchical(Group& local, Group& cross, const HostLayout& l, const void* in,
                            void* out, const std::vector<size_t>& bytesPerRank,
                            std::vector<uint8_t>& scratch) {
  const int hosts = static_cast<int>(l.hosts.size());
  const int perHost = static_cast<int>(l.hosts[0].size());
  std::vector<size_t> worldOffset(bytesPerRank.size());
  size_t total = 0;
  for (size_t r = 0; r < bytesPerRank.size(); ++r) {
    worldOffset[r] = total;
    total += bytesPerRank[r];
  }
  if (total == 0) return;
  const HostSlices s = sliceHosts(l, bytesPerRank);
  // Pieces arrive in the order (local index j, cross rank k): slice j of host crossHosts[k].
  std::vector<size_t> pieceBytes(perHost, 0);  // per local index j, over every host
  for (int j = 0; j < perHost; ++j) {
    for (int h = 0; h < hosts; ++h) pieceBytes[j] += s.bytes[h][j];
  }
  scratch.resize(s.hostBytes[l.host] + total);
  uint8_t* hostBuf = scratch.data();
  uint8_t* pieces = scratch.data() + s.hostBytes[l.host];
  size_t mine = 0;  // where this rank's pieces start among all pieces
  for (int j = 0; j < l.index; ++j) mine += pieceBytes[j];

  std::vector<size_t> localBytes;
  for (int r : l.hosts[l.host]) localBytes.push_back(bytesPerRank[r]);
  local.allgatherv(in, hostBuf, localBytes);
  std::vector<size_t> crossBytes;
  for (int h : l.crossHosts) crossBytes.push_back(s.bytes[h][l.index]);
  cross.allgatherv(hostBuf + s.offset[l.host][l.index], pieces + mine, crossBytes);
  local.allgatherv(pieces + mine, pieces, pieceBytes);

  uint8_t* dst = static_cast<uint8_t*>(out);
  size_t at = 0;
  for (int j = 0; j < perHost; ++j) {
    for (int h : l.crossHosts) {
      placeHostRange(l, h, s.offset[h][j], s.bytes[h][j], pieces + at, dst, worldOffset,
                     bytesPerRank);
      at += s.bytes[h][j];
    }
  }
}

}  // namespace collectives
}  // namespace hora
