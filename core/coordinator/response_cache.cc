#include "core/coordinator/response_cache.h"

#include "core/common/errors.h"

namespace hora {

ResponseCache::ResponseCache(size_t capacity) : slots_(capacity) {}

bool ResponseCache::occupied(int slot) const {
  return slot >= 0 && static_cast<size_t>(slot) < slots_.size() && slots_[slot].used;
}

int ResponseCache::slotOf(const std::string& key) const {
  auto it = byKey_.find(key);
  return it == byKey_.end() ? -1 : it->second;
}

int ResponseCache::lookup(const std::string& key, const Request& request) const {
  int slot = slotOf(key);
  if (slot < 0 || !slots_[slot].request.sameParams(request)) return -1;
  return slot;
}

const std::string& ResponseCache::key(int slot) const {
  HORA_CHECK(occupied(slot), "cache slot " + std::to_string(slot) + " is empty");
  return slots_[slot].key;
}

const Request& ResponseCache::request(int slot) const {
  HORA_CHECK(occupied(slot), "cache slot " + std::to_string(slot) + " is empty");
  return slots_[slot].request;
}

const Response& ResponseCache::response(int slot) const {
  HORA_CHECK(occupied(slot), "cache slot " + std::to_string(slot) + " is empty");
  return slots_[slot].response;
}

void ResponseCache::put(int slot, const std::string& key, const Request& request,
                        const Response& response) {
  HORA_CHECK(slot >= 0 && static_cast<size_t>(slot) < slots_.size(), "bad cache slot");
  Slot& same = slots_[slot];
  if (same.used && same.key == key) {
    // Every cache hit that runs puts its tensor back here. Assigning in place reuses the slot's
    // storage, where evicting and inserting again allocates about ten times per tensor.
    same.request = request;
    same.response = response;
    touch(slot);
    return;
  }
  evict(slot);
  int previous = slotOf(key);
  if (previous >= 0) evict(previous);
  Slot& s = slots_[slot];
  s.used = true;
  s.key = key;
  s.request = request;
  s.response = response;
  lru_.push_front(slot);
  s.lru = lru_.begin();
  byKey_[key] = slot;
}

void ResponseCache::evict(int slot) {
  if (!occupied(slot)) return;
  Slot& s = slots_[slot];
  byKey_.erase(s.key);
  lru_.erase(s.lru);
  s = Slot();
}

void ResponseCache::touch(int slot) {
  if (!occupied(slot)) return;
  lru_.splice(lru_.begin(), lru_, slots_[slot].lru);
}

int ResponseCache::chooseSlot(const std::function<bool(int)>& evictable) const {
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].used) return static_cast<int>(i);
  }
  for (auto it = lru_.rbegin(); it != lru_.rend(); ++it) {
    if (evictable(*it)) return *it;
  }
  return -1;
}

}  // namespace hora
