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

void TensorQueue::push(std::vector<TensorEntry> group) {
  // Keys and entries are made before taking the lock: the background thread takes it every
  // cycle, and a frontend thread that held it through malloc made it wait. A group of one (most
  // submissions) needs no set to find repeats within it.
  std::vector<std::pair<std::string, std::unique_ptr<TensorEntry>>> staged;
  staged.reserve(group.size());
  for (auto& e : group) {
    std::string key = tensorKey(e.request.processSetId, e.request.name);
    staged.emplace_back(std::move(key), std::make_unique<TensorEntry>(std::move(e)));
  }
  if (staged.size() > 1) {
    std::unordered_set<std::string> seen;
    for (const auto& [key, entry] : staged) {
      if (!seen.insert(key).second) throw repeatedName(*entry);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) throw ShutdownError(closedReason_);
  for (const auto& [key, entry] : staged) {
    if (inFlight_.count(key) > 0) throw repeatedName(*entry);
  }
  for (auto& [key, entry] : staged) {
    fresh_.push_back(key);
    inFlight_.emplace(std::move(key), std::move(entry));
  }
}

void TensorQueue::takeNew(std::vector<std::string>& into) {
  into.clear();  // outside the lock: the strings are freed here
  std::lock_guard<std::mutex> lock(mu_);
  into.swap(fresh_);
}

std::vector<std::string> TensorQueue::takeNew() {
  std::vector<std::string> out;
  takeNew(out);
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
