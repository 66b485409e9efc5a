#include "bench/scale/link_census.h"

#include <cstring>
#include <functional>
#include <numeric>
#include <set>
#include <stdexcept>

#include "core/collectives/algorithms.h"
#include "core/collectives/dispatch.h"
#include "core/collectives/hierarchical.h"
#include "core/collectives/scratch_buffers.h"

namespace hora {
namespace scale {
namespace {

using Touched = std::function<void(int peer)>;

// Pipes that are never full and never empty: a rank runs its part of a collective alone.
class AlwaysReadyLinks : public collectives::Links {
 public:
  AlwaysReadyLinks(int rank, int size, Touched touched)
      : rank_(rank), size_(size), touched_(std::move(touched)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  size_t trySend(int peer, const void*, size_t bytes) override {
    note(peer, bytes);
    return bytes;
  }
  size_t tryRecv(int peer, void* data, size_t bytes) override {
    note(peer, bytes);
    std::memset(data, 0, bytes);
    return bytes;
  }
  void waitAny(const Want*, size_t) override {
    throw std::logic_error("an algorithm waited although every pipe was ready");
  }
  uint8_t* scratch(int slot, size_t bytes) override { return scratch_.get(slot, bytes); }

 private:
  void note(int peer, size_t bytes) {
    if (bytes > 0) touched_(peer);
  }
  int rank_, size_;
  Touched touched_;
  collectives::ScratchBuffers scratch_;
};

// One of a hierarchical communicator's two groups, running what a Links-based communicator runs
// for each whole collective (links_communicator.cc).
class AlwaysReadyGroup : public collectives::Group {
 public:
  AlwaysReadyGroup(int rank, int size, Touched touched) : links_(rank, size, std::move(touched)) {}
  int rank() const override { return links_.rank(); }
  int size() const override { return links_.size(); }
  void allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    collectives::allreduce(links_, buf, count, dtype, op);
  }
  void allgatherv(const void* in, void* out, const std::vector<size_t>& bytesPerRank) override {
    collectives::allgathervRing(links_, in, out, bytesPerRank);
  }
  void alltoallv(const void* in, const std::vector<size_t>& sendBytes, void* out,
                 const std::vector<size_t>& recvBytes) override {
    collectives::alltoallv(links_, in, sendBytes, out, recvBytes, /*everyPairLinked=*/false);
  }

 private:
  AlwaysReadyLinks links_;
};

std::vector<int> ranksToRun(int n) {
  std::set<int> ranks;
  if (n <= kCensusAllRanks) {
    for (int r = 0; r < n; ++r) ranks.insert(r);
  } else {
    const int step = n / 256;
    for (int r = 0; r < n; r += step) ranks.insert(r);
    for (int r : {1, n / 2, n - 1}) ranks.insert(r);
  }
  return std::vector<int>(ranks.begin(), ranks.end());
}

// Runs `run` for each rank to run, given that rank and a callback noting the world ranks it
// touched; returns the census.
LinkCensus census(const std::string& name, int n,
                  const std::function<void(int rank, std::set<int>& peers)>& run) {
  LinkCensus c;
  c.algorithm = name;
  c.ranks = n;
  long long total = 0;
  for (int r : ranksToRun(n)) {
    std::set<int> peers;
    run(r, peers);
    const int count = static_cast<int>(peers.size());
    c.maxPeers = std::max(c.maxPeers, count);
    if (r == 0) c.rank0Peers = count;
    total += count;
    ++c.sampled;
  }
  c.meanPeers = static_cast<double>(total) / c.sampled;
  return c;
}

LinkCensus flat(const std::string& name, int n,
                const std::function<void(collectives::Links&)>& algorithm) {
  return census(name, n, [&](int r, std::set<int>& peers) {
    AlwaysReadyLinks links(r, n, [&](int p) { peers.insert(p); });
    algorithm(links);
  });
}

// The hierarchical allreduce of count elements, with ranks placed host by host (ranks h*L ..
// h*L+L-1 on host h, as the launcher places them).
LinkCensus hierarchical(const std::string& name, int n, int hostRanks, size_t count,
                        DataType dtype) {
  const int hosts = n / hostRanks;
  int maxCross = 0, maxHost = 0;
  LinkCensus c = census(name, n, [&](int r, std::set<int>& peers) {
    const int host = r / hostRanks, index = r % hostRanks;
    std::set<int> cross, local;
    AlwaysReadyGroup localGroup(index, hostRanks,
                                [&](int p) { local.insert(host * hostRanks + p); });
    AlwaysReadyGroup crossGroup(host, hosts, [&](int p) { cross.insert(p * hostRanks + index); });
    std::vector<uint8_t> buf(count * dtypeSize(dtype)), scratch;
    collectives::allreduceHierarchical(localGroup, crossGroup, buf.data(), count, dtype,
                                       ReduceOp::Sum, scratch);
    maxCross = std::max(maxCross, static_cast<int>(cross.size()));
    maxHost = std::max(maxHost, static_cast<int>(local.size()));
    peers.insert(cross.begin(), cross.end());
    peers.insert(local.begin(), local.end());
  });
  c.maxCrossHostPeers = maxCross;
  c.maxHostPeers = maxHost;
  return c;
}

}  // namespace

std::vector<LinkCensus> linkCensus(int n, int ranksPerHost) {
  std::vector<LinkCensus> out;
  const size_t blocks = 4 * static_cast<size_t>(n);  // a few elements per rank's block
  std::vector<uint8_t> buf;
  auto bytes = [&](size_t size) -> uint8_t* {
    buf.assign(size, 0);
    return buf.data();
  };
  out.push_back(flat("allreduce recursive doubling", n, [&](collectives::Links& l) {
    collectives::allreduceRecursiveDoubling(l, bytes(1024), 256, DataType::Int32, ReduceOp::Sum);
  }));
  out.push_back(flat("allreduce ring", n, [&](collectives::Links& l) {
    collectives::allreduceRing(l, bytes(blocks * 4), blocks, DataType::Int32, ReduceOp::Sum);
  }));
  out.push_back(flat("allreduce gather-fold", n, [&](collectives::Links& l) {
    collectives::allreduceGatherFold(l, bytes(4), 1, DataType::Float32, ReduceOp::Sum);
  }));
  out.push_back(flat("allreduce rank-ordered", n, [&](collectives::Links& l) {
    collectives::allreduceRankOrdered(l, bytes(blocks * 4), blocks, DataType::Float32,
                                      ReduceOp::Sum);
  }));
  out.push_back(flat("allreduce chain-ordered", n, [&](collectives::Links& l) {
    collectives::allreduceChainOrdered(l, bytes(blocks * 4), blocks, DataType::Float32,
                                       ReduceOp::Sum);
  }));
  out.push_back(flat("allreduce bruck-ordered", n, [&](collectives::Links& l) {
    collectives::allreduceBruckOrdered(l, bytes(blocks * 4), blocks, DataType::Float32,
                                       ReduceOp::Sum);
  }));
  out.push_back(flat("allgatherv ring", n, [&](collectives::Links& l) {
    std::vector<size_t> per(n, 4);
    collectives::allgathervRing(l, bytes(4 * n), buf.data(), per);
  }));
  out.push_back(flat("allgatherv bruck", n, [&](collectives::Links& l) {
    std::vector<size_t> per(n, 4);
    collectives::allgathervBruck(l, bytes(4 * n), buf.data(), per);
  }));
  out.push_back(flat("reducescatter ring", n, [&](collectives::Links& l) {
    std::vector<size_t> counts(n, 4);
    std::vector<uint8_t> mine(16);
    collectives::reduceScatterRing(l, bytes(16 * n), mine.data(), counts, DataType::Int32,
                                   ReduceOp::Sum);
  }));
  out.push_back(flat("broadcast binomial tree", n, [&](collectives::Links& l) {
    collectives::broadcastBinomial(l, bytes(1024), 1024, 0);
  }));
  out.push_back(flat("broadcast chain", n, [&](collectives::Links& l) {
    collectives::broadcastChain(l, bytes(64 << 10), 64 << 10, 0);
  }));
  out.push_back(flat("barrier dissemination", n,
                     [&](collectives::Links& l) { collectives::barrierDissemination(l); }));
  out.push_back(flat("alltoallv pairwise", n, [&](collectives::Links& l) {
    std::vector<size_t> per(n, 4);
    std::vector<uint8_t> in(4 * n);
    collectives::alltoallvPairwise(l, in.data(), per, bytes(4 * n), per);
  }));
  out.push_back(flat("alltoallv bruck", n, [&](collectives::Links& l) {
    // Empty blocks: what these pipes deliver (zeros) is then what the rounds' size tables say,
    // and the tables cross the same links in every round as the blocks would.
    std::vector<size_t> none(n, 0);
    uint8_t unused = 0;
    collectives::alltoallvBruck(l, &unused, none, &unused, none);
  }));
  if (ranksPerHost > 0 && n % ranksPerHost == 0 && n / ranksPerHost > 1) {
    // 1 KiB: recursive doubling across hosts; 1 MiB: the ring (integers) or the chain-ordered
    // allreduce (float Sum from 3 hosts on) for each 1/L slice.
    out.push_back(
        hierarchical("hierarchical allreduce 1 KiB int32", n, ranksPerHost, 256, DataType::Int32));
    out.push_back(hierarchical("hierarchical allreduce 1 MiB int32", n, ranksPerHost, 1 << 18,
                               DataType::Int32));
    out.push_back(hierarchical("hierarchical allreduce 1 MiB float32 Sum", n, ranksPerHost, 1 << 18,
                               DataType::Float32));
  }
  return out;
}

}  // namespace scale
}  // namespace hora
