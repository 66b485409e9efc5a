#include "core/coordinator/tensor_queue.h"

#include <unordered_set>

#include "core/common/errors.h"

namespace hora {

std::string tensorKey(int processSetId, const std::string& name) {
  return std::to_string(processSetId) + ":" + name;
}

void TensorQueue::push(std::vector<TensorEntry> group) {
  // Keys are built before taking the lock, once each; a group of one (most submissions) needs no
  // set to find repeats within it.
  std::vector<std::string> keys;
  keys.reserve(group.size());
  for (const auto& e : group) keys.push_back(tensorKey(e.request.processSetId, e.request.name));
  std::unordered_set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) throw ShutdownError(closedReason_);
  for (size_t i = 0; i < group.size(); ++i) {
    bool repeated = group.size() > 1 && !seen.insert(keys[i]).second;
    if (repeated || inFlight_.count(keys[i]) > 0) {
      const TensorEntry& e = group[i];
      throw InvalidArgument("Requested to " + std::string(opKindName(e.request.kind)) +
                            " a tensor with the same name as another tensor that is currently "
                            "being processed: '" +
                            e.request.name + "'. Give each in-flight tensor a unique name.");
    }
  }
  for (size_t i = 0; i < group.size(); ++i) {
    inFlight_.emplace(keys[i], std::make_unique<TensorEntry>(std::move(group[i])));
    fresh_.push_back(std::move(keys[i]));
  }
}

std::vector<std::string> TensorQueue::takeNew() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  out.swap(fresh_);
  return out;
}

TensorEntry* TensorQueue::find(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = inFlight_.find(key);
  return it == inFlight_.end() ? nullptr : it->second.get();
}

std::unique_ptr<TensorEntry> TensorQueue::remove(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = inFlight_.find(key);
  if (it == inFlight_.end()) return nullptr;
  auto entry = std::move(it->second);
  inFlight_.erase(it);
  return entry;
}

std::vector<std::unique_ptr<TensorEntry>> TensorQueue::closeAndDrain(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  closedReason_ = reason;
  std::vector<std::unique_ptr<TensorEntry>> out;
  for (auto& kv : inFlight_) out.push_back(std::move(kv.second));
  inFlight_.clear();
  fresh_.clear();
  return out;
}

}  // namespace hora
