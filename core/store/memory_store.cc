#include "core/store/memory_store.h"

#include <cerrno>
#include <cstdlib>

#include "core/common/errors.h"

namespace hora {

std::string storeTimeoutMessage(const std::vector<std::string>& missing, Millis timeout) {
  std::string names;
  for (const auto& k : missing) names += (names.empty() ? "'" : ", '") + k + "'";
  return "store: timed out after " + std::to_string(timeout.count()) + " ms waiting for key(s) " +
         names + " (a rank that should set them has not started or has failed)";
}

int64_t parseCounter(const std::string& key, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0) {
    throw InvalidArgument("store: add() on key '" + key + "' whose value is not an integer");
  }
  return v;
}

void MemoryStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    values_[key] = value;
  }
  changed_.notify_all();
}

std::string MemoryStore::get(const std::string& key, Millis timeout) {
  wait({key}, timeout);
  std::lock_guard<std::mutex> lock(mutex_);
  return values_[key];
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t result;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = values_.find(key);
    int64_t current = it == values_.end() ? 0 : parseCounter(key, it->second);
    result = static_cast<int64_t>(static_cast<uint64_t>(current) + static_cast<uint64_t>(delta));
    values_[key] = std::to_string(result);
  }
  changed_.notify_all();
  return result;
}

bool MemoryStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(mutex_);
  return missingLocked(keys).empty();
}

void MemoryStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  auto deadline = Clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    auto missing = missingLocked(keys);
    if (missing.empty()) return;
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout) {
      missing = missingLocked(keys);
      if (missing.empty()) return;
      throw TimeoutError(storeTimeoutMessage(missing, timeout));
    }
  }
}

std::vector<std::optional<std::string>> MemoryStore::getMany(const std::vector<std::string>& keys,
                                                             Millis timeout) {
  auto deadline = Clock::now() + timeout;
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_until(lock, deadline, [&] { return missingLocked(keys).empty(); });
  std::vector<std::optional<std::string>> values;
  values.reserve(keys.size());
  for (const auto& k : keys) {
    auto it = values_.find(k);
    values.push_back(it == values_.end() ? std::nullopt : std::make_optional(it->second));
  }
  return values;
}

std::vector<std::string> MemoryStore::missingLocked(const std::vector<std::string>& keys) const {
  std::vector<std::string> missing;
  for (const auto& k : keys) {
    if (values_.find(k) == values_.end()) missing.push_back(k);
  }
  return missing;
}

}  // namespace hora
