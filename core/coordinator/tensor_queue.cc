#include "core/coordinator/tensor_queue.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "core/common/errors.h"

namespace hora {

std::string tensorKey(int processSetId, const std::string& name) {
  return std::to_string(processSetId) + ":" + name;
}

namespace {

InvalidArgument repeatedName(const TensorEntry& e) {
  return InvalidArgument("Requested to " + std::string(opKindName(e.request.kind)) +
                         " a tensor with the same name as another tensor that is currently "
                         "being processed: '" +
                         e.request.name + "'. Give each in-flight tensor a unique name.");
}

}  // namespace

TensorQueue::EntryMap::node_type TensorQueue::makeNode(std::string key,
                                                       std::unique_ptr<TensorEntry> entry) {
  thread_local EntryMap factory;  // always empty between calls; keeps its buckets
  auto it = factory.emplace(std::move(key), std::move(entry)).first;
  return factory.extract(it);
}

void TensorQueue::push(std::vector<TensorEntry> group) {
  // Keys and map nodes are made before taking the lock: the background thread takes it every
  // cycle, and a frontend thread that held it through malloc made it wait. A group of one (most
  // submissions) needs no set to find repeats within it.
  // Each key twice: one for fresh_, one in its node.
  std::vector<std::pair<std::string, EntryMap::node_type>> staged;
  staged.reserve(group.size());
  for (auto& e : group) {
    std::string key = tensorKey(e.request.processSetId, e.request.name);
    EntryMap::node_type node = makeNode(key, std::make_unique<TensorEntry>(std::move(e)));
    staged.emplace_back(std::move(key), std::move(node));
  }
  if (staged.size() > 1) {
    std::unordered_set<std::string> seen;
    for (const auto& [key, node] : staged) {
      if (!seen.insert(key).second) throw repeatedName(*node.mapped());
    }
  }
  // Frees what the background thread retired, after the lock is let go (also on a throw): the
  // memory goes back to this thread's cache, for the next entries.
  thread_local Retired toFree;
  struct FreeAfter {
    Retired& r;
    ~FreeAfter() { r.clear(); }
  } freeAfter{toFree};
  std::lock_guard<BriefMutex> lock(mu_);
  toFree.swap(retired_);
  if (closed_) throw ShutdownError(closedReason_);
  for (const auto& [key, node] : staged) {
    if (inFlight_.count(key) > 0) throw repeatedName(*node.mapped());
  }
  // fresh_ keeps the capacity of the loop's last vector (takeNew): the strings move in.
  for (auto& [key, node] : staged) {
    inFlight_.insert(std::move(node));
    fresh_.push_back(std::move(key));
  }
}

void TensorQueue::takeNew(std::vector<std::string>& into) {
  into.clear();  // outside the lock: the strings are freed here
  std::lock_guard<BriefMutex> lock(mu_);
  into.swap(fresh_);
}

std::vector<std::string> TensorQueue::takeNew() {
  std::vector<std::string> out;
  takeNew(out);
  return out;
}

TensorEntry* TensorQueue::find(const std::string& key) {
  std::lock_guard<BriefMutex> lock(mu_);
  auto it = inFlight_.find(key);
  return it == inFlight_.end() ? nullptr : it->second.get();
}

std::unique_ptr<TensorEntry> TensorQueue::remove(const std::string& key) {
  std::lock_guard<BriefMutex> lock(mu_);
  auto node = inFlight_.extract(key);
  if (node.empty()) return nullptr;
  std::unique_ptr<TensorEntry> entry = std::move(node.mapped());
  try {
    retired_.nodes.push_back(std::move(node));  // the key and the node, freed by push()
  } catch (...) {                               // no room: freed here, as before retiring existed
  }
  return entry;
}

void TensorQueue::retire(std::vector<std::unique_ptr<TensorEntry>>& entries) {
  // A handle may hold a result (an allgather's output): it is let go now, not at the next push.
  for (auto& e : entries) {
    if (e) e->handle.reset();
  }
  {
    std::lock_guard<BriefMutex> lock(mu_);
    try {
      for (auto& e : entries) {
        if (e) retired_.entries.push_back(std::move(e));
      }
    } catch (...) {  // no room: what is left is freed below, as before retiring existed
    }
  }
  entries.clear();
}

std::vector<std::unique_ptr<TensorEntry>> TensorQueue::closeAndDrain(const std::string& reason) {
  Retired toFree;  // freed on return, after the lock is let go
  std::lock_guard<BriefMutex> lock(mu_);
  toFree.swap(retired_);
  closed_ = true;
  closedReason_ = reason;
  std::vector<std::unique_ptr<TensorEntry>> out;
  for (auto& kv : inFlight_) out.push_back(std::move(kv.second));
  inFlight_.clear();
  fresh_.clear();
  return out;
}

}  // namespace hora
