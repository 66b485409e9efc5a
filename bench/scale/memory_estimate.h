#pragma once
// Estimates of the heap a rank's negotiation state holds, from the containers' sizes and
// capacities: sizeof of each element plus the heap of its strings (beyond the small-string buffer)
// and vectors (capacity x element size), plus kNodeBytes per hash-map or list node (two pointers
// and a cached hash). The allocator's own overhead is not counted. An estimate, not a measurement:
// it says how state grows with N and T, not the exact bytes malloc hands out.
#include <cstddef>
#include <string>

#include "core/coordinator/coordinator.h"

namespace hora {
namespace scale {

constexpr size_t kNodeBytes = 24;

size_t stringHeap(const std::string& s);
size_t requestHeap(const Request& r);    // heap only; add sizeof(Request) where held by value
size_t responseHeap(const Response& r);  // likewise
// One occupied slot of a ResponseCache: key, request and response by value, their heap, an LRU
// list node and a key-index node (a second copy of the key).
size_t cacheEntryBytes(const std::string& key, const Request& request, const Response& response);
// An empty slot of a ResponseCache (slots are allocated up front, HORA_CACHE_CAPACITY of them).
size_t emptyCacheSlotBytes();
// The coordinator's pending table as it stands.
size_t pendingBytes(const Coordinator& c);
// The coordinator's per-rank vectors (joined, waiting, wait reports), per-slot change marks and
// its table of cache reports (CacheHits).
size_t coordinatorFixedBytes(int worldSize, size_t cacheCapacity);

}  // namespace scale
}  // namespace hora
