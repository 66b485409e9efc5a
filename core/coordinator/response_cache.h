#pragma once
// ResponseCache: tensors negotiated before, by slot. Once a tensor name has been negotiated with
// the same parameters, a rank reports it ready again with one bit (its slot) instead of a full
// request, and the coordinator answers from the cached response. Every rank keeps a copy whose
// slots change only when a response batch is applied, so slot numbers mean the same on all ranks.
//
// The coordinator (world rank 0) owns the authoritative copy: it assigns slots, chooses LRU
// victims and remembers the response of each slot. Each rank's participant copy remembers its own
// request per slot, to tell a hit (same parameters) from a renegotiation.
//
// Not thread-safe: the background thread owns it.
#include <cstdint>
#include <functional>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/messages/messages.h"

namespace hora {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity);

  size_t capacity() const { return slots_.size(); }
  bool enabled() const { return !slots_.empty(); }
  bool occupied(int slot) const;

  int slotOf(const std::string& key) const;  // -1 when absent
  // Slot of `key` if its cached request has the same parameters as `request`, else -1.
  int lookup(const std::string& key, const Request& request) const;

  const std::string& key(int slot) const;
  const Request& request(int slot) const;
  const Response& response(int slot) const;

  // Replaces whatever the slot held.
  void put(int slot, const std::string& key, const Request& request, const Response& response);
  void evict(int slot);  // no-op for an empty slot

  // Coordinator only: LRU bookkeeping and slot choice.
  void touch(int slot);
  // A free slot, else the least recently used slot for which `evictable` is true, else -1.
  int chooseSlot(const std::function<bool(int)>& evictable) const;

 private:
  struct Slot {
    bool used = false;
    std::string key;
    Request request;
    Response response;
    std::list<int>::iterator lru;
  };
  std::vector<Slot> slots_;
  std::unordered_map<std::string, int> byKey_;
  std::list<int> lru_;  // front = most recently used
};

}  // namespace hora
