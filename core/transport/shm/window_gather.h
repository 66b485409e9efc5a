#pragma once
// The window gather: allgatherv and broadcast over the whole job through the ranks' windows
// instead of the rings.
//
// Every rank's output is one buffer in which each rank supplies one range (allgatherv: its block;
// broadcast: the root, all of it). It goes through in parts that fit one half of a window (the
// steps of window_steps.h), each part carrying an even piece of every rank's range, so that all
// ranks copy at once; for part k, every rank copies its piece into its own half, publishes step
// 2k - 1 and waits until every rank did, then copies every other rank's piece straight from that
// rank's half into its output, and publishes 2k.
// Each byte is copied once into a window and once out of it on each reader, whatever the rank
// count, where the ring copies each block in and out at every hop.
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
