#include "core/coordinator/tensor_queue.h"

#include <unordered_set>

#include "core/common/errors.h"

namespace hora {

std::string tensorKey(int processSetId, const std::string& name) {
  return std::to_string(processSetId) + ":" + name;
}

void TensorQueue::push(std::vector<TensorEntry> group) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) throw ShutdownError(closedReason_);
  std::unordered_set<std::string> keys;
  for (const auto& e : group) {
    auto key = tensorKey(e.request.processSetId, e.request.name);
    if (inFlight_.count(key) > 0 || !keys.insert(key).second) {
      throw InvalidArgument("Requested to " + std::string(opKindName(e.request.kind)) +
                            " a tensor with the same name as another tensor that is currently "
                            "being processed: '" +
                            e.request.name + "'. Give each in-flight tensor a unique name.");
    }
  }
  for (auto& e : group) {
    auto key = tensorKey(e.request.processSetId, e.request.name);
    inFlight_.emplace(key, std::make_unique<TensorEntry>(std::move(e)));
    fresh_.push_back(std::move(key));
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
