#pragma once
// The window gather: a collective over the whole job in which every rank's output is one buffer
// and each rank supplies one range of it, through the ranks' windows instead of the rings. Large
// broadcasts run it, the root supplying the whole buffer (algorithm_table.h,
// kWindowBroadcastMinBytes); an allgatherv would be the same with every rank's block.
//
// The output goes through in parts that fit one half of a window (the steps of window_steps.h),
// each part carrying an even piece of every rank's range, so that all ranks copy at once. For
// part k, every rank copies its piece into its own half, publishes step 2k - 1 and waits until
// every rank did, then copies every other rank's piece straight from that rank's half into its
// output, and publishes 2k. Each byte is copied once into a window and once out of it on each
// reader, whatever the rank count.
#include <cstddef>
#include <vector>

#include "core/transport/shm/links.h"

namespace hora {
namespace shm {

// links: a group of every rank of the segment, in order. Rank r supplies bytes[r] bytes at
// offsets[r] of out (ranges disjoint, within total); this rank's come from `mine` (which may be
// out + offsets[me]).
void windowGather(ShmLinks& links, void* out, size_t total, const std::vector<size_t>& offsets,
                  const std::vector<size_t>& bytes, const void* mine);

}  // namespace shm
}  // namespace hora
