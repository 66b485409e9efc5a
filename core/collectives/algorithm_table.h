#pragma once
// The one place that picks an algorithm per collective and size, and sizes pipeline segments, for
// every transport that runs the algorithms of this folder. The values were chosen from 2- and
// 4-rank measurements over TCP loopback on a 2-core host; revisit them with bench/ on real
// networks, other transports and larger jobs.
#include <cstddef>

namespace hora {
namespace collectives {

// Allreduce below this many bytes uses recursive doubling: log2(N) rounds, each moving the whole
// buffer, which is latency-optimal. At and above it the ring (reduce-scatter + allgather) wins:
// every rank sends only 2(N-1)/N of the buffer, and segments pipeline through the ring. Measured
// crossover: 64 KiB clearly favours recursive doubling, 256 KiB clearly favours the ring, both
// for 2 and 4 ranks. Recursive doubling also runs whenever count < size (empty ring blocks).
constexpr size_t kAllreduceRingMinBytes = 128 << 10;

// Ring pipelines move data in segments of this size: a rank forwards a segment as soon as it has
// received (and reduced) it instead of waiting for the whole block. Smaller segments fill the
// pipeline sooner; larger ones cost fewer system calls. 64 KiB to 1 MiB measured the same for
// large 2-rank allreduces; 128 KiB keeps the fill time of a 7-rank ring short.
constexpr size_t kRingSegmentBytes = 128 << 10;

// Staging buffer for data received before it is reduced: received bytes are reduced into the
// destination straight from here, a piece at a time, while they are still in L2.
constexpr size_t kRecvStagingBytes = 128 << 10;

// Broadcast below this many bytes walks a binomial tree (log2(N) hops, latency-bound). Larger
// broadcasts stream through a chain rooted at the root, in segments, so every link carries the
// buffer once and the hops overlap.
constexpr size_t kBroadcastChainMinBytes = 64 << 10;

// Over shared memory (core/transport/shm/), a small allreduce over the whole job is a shared
// payload (SharedPayload): every rank publishes its whole buffer beside a sequence number, and
// every rank folds all of them itself, in rank order: one publication and one wait. Up to 56
// bytes, what a 64-byte line holds beside the sequence number and size, it travels in the rank's
// own line; above, in a payload block of the rank's, at most kSharedPayloadMaxBytes.
constexpr size_t kSharedPayloadMaxBytes = 8 << 10;
// Each rank reads every rank's payload: up to this many bytes in all, so a large job's ranks take
// the window (each reduces a slice) before their folds cost more than its second wait.
constexpr size_t kSharedPayloadFoldBytes = 32 << 10;

// The largest allreduce a group of `size` ranks runs as a shared payload. Measured on 2 cores,
// 2 ranks bound (4 B to 16 KiB through hora.torch, against the window's two waits per part):
// 64 B to 1 KiB in 3.6-3.8 us against 4.4-4.6 us, 4 KiB in 4.1 against 4.5-4.7 us, 16 KiB level
// (4.9 against 5.0 us).
inline size_t sharedPayloadMaxBytes(int size) {
  size_t byFold = kSharedPayloadFoldBytes / static_cast<size_t>(size < 1 ? 1 : size);
  return byFold < kSharedPayloadMaxBytes ? byFold : kSharedPayloadMaxBytes;
}

// Over shared memory with windows, a broadcast over the whole job of at least this many bytes
// goes through the root's window (core/transport/shm/window_gather.h) instead of the tree or the
// chain over the rings. Measured on 2 cores (bench/gather.py): at 2 ranks 1.6x faster at 512 KiB,
// 2-3.5x from 1 MiB to 32 MiB, slower below (0.45-0.9x at 4 KiB to 256 KiB, where the tree is one
// hop through a ring); at 4 ranks 1.0-1.08x from 256 KiB and 1.7x at 32 MiB. Allgathers stay on
// the rings: through the windows they measured 0.66-1.10x at 2 ranks and 0.94-1.11x at 4.
constexpr size_t kWindowBroadcastMinBytes = 512 << 10;

// The hierarchical allreduce and allgather (hierarchical.h) are not chosen per size here: the
// user asks for them per job (HORA_HIERARCHICAL_ALLREDUCE / _ALLGATHER), and makeGlobalCommunicator
// (core/transport/hierarchical_communicator.h) grants them once, at start, when the hosts allow.
// Their steps inside and across hosts then pick their algorithms from this table as usual.

// When the order matters (needsRankOrder), an allreduce whose N-1 peers' buffers together hold at
// most this many bytes gathers them all and folds them in rank order (gather_fold.cc): log2(N)
// rounds instead of the rank-ordered allreduce's N, the same bits.
constexpr size_t kGatherFoldMaxBytes = 64 << 10;

// The chain-ordered allreduce (chain_ordered.cc) cuts a buffer of B bytes on N ranks in segments
// of B / (2 (N-1)), at least kChainMinSegmentBytes and at most kRingSegmentBytes. Each segment
// crosses 2 (N-1) links one after another, so in one or two segments a buffer would wait for
// 2 (N-1) whole transfers; 2 (N-1) segments or more keep every link busy while the pipe fills
// (about 4 (N-1) steps of one segment, then the rest streams). Large buffers keep 128 KiB
// segments: fixed 32 KiB segments measured 2-4x slower for 4-64 MiB over loopback TCP at 3 and 4
// ranks on 2 cores. The floor only stops a segment from shrinking to a few bytes at large N.
constexpr size_t kChainMinSegmentBytes = 1 << 10;

inline size_t chainSegmentBytes(size_t bytes, int size, size_t elementSize) {
  size_t want = size > 1 ? bytes / (2 * static_cast<size_t>(size - 1)) : bytes;
  want = want < kChainMinSegmentBytes ? kChainMinSegmentBytes : want;
  want = want > kRingSegmentBytes ? kRingSegmentBytes : want;
  const size_t elements = want / elementSize;
  return (elements > 0 ? elements : 1) * elementSize;
}

// When the order matters and the gather-fold does not take the buffer, the chain-ordered
// allreduce (chain_ordered.cc) runs, except at this many ranks, where the rank-ordered one does
// (rank_ordered.cc). The chain talks only to its two ring neighbours, where the rank-ordered
// allreduce opens a link to every other rank (N-1): at 4 ranks that is 3 against 2, and there the
// rank-ordered one measured faster; at 3 ranks both use 2 links and the chain measured faster
// from 4 MiB on.
// Measured over loopback TCP on 2 shared cores (bench/allreduce.py, HORA_SHM_DISABLE=1, float32
// Sum, medians of 3-7 runs of 20 iterations, chain / rank-ordered, in a busy hour (load 7-9) and
// a quieter one (load 4)): at 3 ranks 0.86x / 1.32x at 256 KiB, 0.98x / 1.00x at 1 MiB, 0.38x /
// 0.70x at 4 MiB, 0.41x / 0.75x at 16 MiB, 0.51x / 0.58x at 64 MiB, 0.87x / 0.96x for the
// 200 x 16 KiB step; at 4 ranks 1.19x / 1.01x at 256 KiB, 1.11x / 1.27x at 1 MiB, 1.11x / 1.16x at
// 4 MiB, 1.25x / 1.07x at 16 MiB, 1.01x / 1.07x at 64 MiB, 0.93x / 1.05x for the step. The
// alpha-beta model (bench/scale/allreduce_model.cc) gives the chain the same O(N) latency as the
// rank-ordered allreduce (2 (N-1) hops against 2 (N-1) messages) and 2 B per link against
// 2 (N-1)/N B: 1.33x more bytes at 4 ranks, 1.14x at 8, 1.02x at 64; in all it models at
// 1.2-2.4x the rank-ordered allreduce's time from 8 to 4,096 ranks, counting no cost per
// connection. From 5 ranks on the chain's 2 links against N-1 decide.
constexpr int kRankOrderedRanks = 4;

// When the order matters, from this many ranks on, a buffer whose blocks (bytes / N, one per
// rank) are at most kBruckOrderedMaxBlockBytes takes the Bruck-ordered allreduce
// (bruck_ordered.cc) where the gather-fold does not: 2 ceil(log2 N) rounds in a row instead of
// the chain's 2 (N-1) hops, for about log2(N) / 2 + 1 times the buffer's bytes sent per rank
// instead of 2. In the alpha-beta model (bench/scale: 5 us and 10 Gbit/s per link) the chain
// takes 1.4-2.3x its time at the bound from 5 to 4,096 ranks, and far more below it (4 KiB at
// 4,096 ranks: 48 ms against 0.14 ms); at four times the bound, 0.6x (4,096 ranks) to 1.5x
// (5 ranks). Measured just under the bound over loopback TCP on 2 cores (medians of 400, 3
// alternated pairs, against the chain): 5 ranks 256-318 us against 459-551 us, 6 ranks 272-366
// against 743-824 us, 7 ranks 360-400 against 958-1,154 us.
constexpr int kBruckOrderedMinRanks = 5;
constexpr size_t kBruckOrderedMaxBlockBytes = 4 << 10;

enum class AllreduceAlgorithm {
  RecursiveDoubling,
  Ring,
  RankOrdered,
  ChainOrdered,
  BruckOrdered,
  GatherFold,
  SharedPayload,
  Window
};
enum class BroadcastAlgorithm { BinomialTree, Chain };
enum class AllgatherAlgorithm { Ring, Bruck };
enum class AlltoallAlgorithm { Pairwise, Bruck };

// Floating-point Sum and Product depend on the order of the operands. With two ranks every
// algorithm computes a + b (commutative, so identical); from three ranks on, recursive doubling
// and the ring reduce in orders that depend on the size and position, so a fused buffer would not
// match its tensors run alone. Those cases fold in rank order at every size: the gather-fold, the
// Bruck-ordered, the chain-ordered or the rank-ordered allreduce (the same bits).
inline bool needsRankOrder(bool floating, bool orderSensitiveOp, int size) {
  return floating && orderSensitiveOp && size >= 3;
}

// sharedPayloads: the transport offers SharedPayload (shared memory over the whole job), which
// folds in rank order, so it also serves the cases that need rank order. window: the ranks also
// have windows in their segment (core/transport/shm/window_allreduce.h); every larger message
// then goes there, reduced in place by all ranks at once, its slices folded in rank order where
// that matters. Measured on 2 cores against the rings (bench/allreduce.py --rings, ranks bound):
// at 2 ranks on a par from 4 B to 64 KiB and faster above (1 MiB in 123-139 us against 140 us,
// 64 MiB in 10.8-11.1 ms against 14.5 ms, the 200 x 16 KiB step 1.2-1.3 ms against 1.8 ms); at 4
// ranks on a par at 4 B and faster above (1.2x at 4 KiB, 1.5-1.7x from 1 MiB).
// Without windows, larger shared-memory messages take the same algorithms as TCP, staged through
// the bounded rings (chunked staging).
inline AllreduceAlgorithm chooseAllreduce(size_t bytes, size_t count, int size,
                                          bool rankOrder = false, bool sharedPayloads = false,
                                          bool window = false) {
  if (sharedPayloads && bytes <= sharedPayloadMaxBytes(size)) {
    return AllreduceAlgorithm::SharedPayload;
  }
  if (window) return AllreduceAlgorithm::Window;
  if (rankOrder) {
    if (bytes * (size - 1) <= kGatherFoldMaxBytes) return AllreduceAlgorithm::GatherFold;
    if (size >= kBruckOrderedMinRanks &&
        bytes <= kBruckOrderedMaxBlockBytes * static_cast<size_t>(size)) {
      return AllreduceAlgorithm::BruckOrdered;
    }
    return size == kRankOrderedRanks ? AllreduceAlgorithm::RankOrdered
                                     : AllreduceAlgorithm::ChainOrdered;
  }
  if (bytes < kAllreduceRingMinBytes || count < static_cast<size_t>(size)) {
    return AllreduceAlgorithm::RecursiveDoubling;
  }
  return AllreduceAlgorithm::Ring;
}

// Alltoall from this many ranks on takes Bruck's exchange: 2 ceil(log2 N) links per rank instead
// of the pairwise exchange's N - 1 (each a TCP connection, opened on first use), for about
// log2(N) / 2 times the bytes. Below it, and where every pair is linked anyway (everyPairLinked:
// shared memory's rings), the pairwise exchange moves every byte once.
constexpr int kAlltoallBruckMinRanks = 32;

inline AlltoallAlgorithm chooseAlltoall(int size, bool everyPairLinked = false) {
  return size >= kAlltoallBruckMinRanks && !everyPairLinked ? AlltoallAlgorithm::Bruck
                                                            : AlltoallAlgorithm::Pairwise;
}

// Allgather from this many ranks on, of blocks of at most kAllgatherBruckMaxBlockBytes on average,
// takes the Bruck allgather (bruck_allgather.cc): ceil(log2 N) rounds instead of the ring's N - 1
// steps, for the same bytes sent per rank, at the price of 2 ceil(log2 N) links instead of 2, and
// of staging the whole result once more and copying it into place at the end, which is what the
// bound keeps small against the latencies saved: (N - 1 - ceil(log2 N)) latencies of about 5 us
// (the scale model's) cover a copy of 16 KiB per rank at a few GB/s. In the model, 4 bytes per rank
// at 4,096 ranks take 73 us instead of 20.5 ms; start-up's agreements are such allgathers. From 32
// ranks, as for alltoall (kAlltoallBruckMinRanks): below, the ring's N - 1 steps are few, and its
// 2 links are what a job of ring collectives keeps. Nothing measured: the model's choice.
constexpr int kAllgatherBruckMinRanks = 32;
constexpr size_t kAllgatherBruckMaxBlockBytes = 16 << 10;

inline AllgatherAlgorithm chooseAllgather(size_t totalBytes, int size) {
  return size >= kAllgatherBruckMinRanks &&
                 totalBytes <= kAllgatherBruckMaxBlockBytes * static_cast<size_t>(size)
             ? AllgatherAlgorithm::Bruck
             : AllgatherAlgorithm::Ring;
}

inline BroadcastAlgorithm chooseBroadcast(size_t bytes, int size) {
  return (bytes < kBroadcastChainMinBytes || size <= 2) ? BroadcastAlgorithm::BinomialTree
                                                        : BroadcastAlgorithm::Chain;
}

}  // namespace collectives
}  // namespace hora
