#include "bench/scale/memory_estimate.h"

namespace hora {
namespace scale {

size_t stringHeap(const std::string& s) {
  // libstdc++ keeps up to 15 characters in the string object itself.
  return s.capacity() > 15 ? s.capacity() + 1 : 0;
}

size_t requestHeap(const Request& r) {
  return stringHeap(r.name) + r.shape.capacity() * sizeof(int64_t) +
         r.splits.capacity() * sizeof(int32_t) + r.processSet.ranks.capacity() * sizeof(int32_t) +
         stringHeap(r.callSite);
}

size_t responseHeap(const Response& r) {
  size_t n = r.names.capacity() * sizeof(std::string);
  for (const auto& name : r.names) n += stringHeap(name);
  n += (r.elementCounts.capacity() + r.rowElements.capacity() + r.gatheredRows.capacity() +
        r.splitsMatrix.capacity()) *
       sizeof(int64_t);
  n += (r.cacheSlots.capacity() + r.processSet.ranks.capacity()) * sizeof(int32_t);
  return n + stringHeap(r.errorMessage);
}

size_t cacheEntryBytes(const std::string& key, const Request& request, const Response& response) {
  return stringHeap(key) + requestHeap(request) + responseHeap(response) + kNodeBytes + kNodeBytes +
         sizeof(std::string) + sizeof(int) + stringHeap(key);
}

size_t emptyCacheSlotBytes() {
  return sizeof(bool) + sizeof(std::string) + sizeof(Request) + sizeof(Response) + sizeof(void*);
}

size_t pendingBytes(const Coordinator& c) {
  size_t n = 0;
  for (const auto& kv : c.pending()) {
    const PendingTensor& p = kv.second;
    n += kNodeBytes + sizeof(std::string) + stringHeap(kv.first) + sizeof(PendingTensor);
    n += stringHeap(p.name) + p.requests.capacity() * sizeof(Request);
    n += p.twins.capacity() * sizeof(uint64_t);
    for (const auto& r : p.requests) n += requestHeap(r);
  }
  return n;
}

size_t coordinatorFixedBytes(int worldSize, size_t cacheCapacity) {
  // joined_ and waiting_ are bit vectors; waitReportedAt_ one uint64_t per rank; CacheHits one
  // row of N bits and a count per slot.
  const size_t ranks = static_cast<size_t>(worldSize);
  const size_t hits = cacheCapacity * ((ranks + 63) / 64 * sizeof(uint64_t) + sizeof(uint32_t));
  return sizeof(Coordinator) + 2 * (ranks + 7) / 8 + ranks * sizeof(uint64_t) +
         cacheCapacity * sizeof(uint64_t) + hits;
}

}  // namespace scale
}  // namespace hora
