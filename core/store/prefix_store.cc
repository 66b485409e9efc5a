#include "core/store/prefix_store.h"

namespace hora {

PrefixStore::PrefixStore(Store& base, std::string prefix)
    : base_(base), prefix_(std::move(prefix)) {}

std::vector<std::string> PrefixStore::full(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(full(k));
  return out;
}

void PrefixStore::set(const std::string& key, const std::string& value) {
  base_.set(full(key), value);
}

std::string PrefixStore::get(const std::string& key, Millis timeout) {
  return base_.get(full(key), timeout);
}

int64_t PrefixStore::add(const std::string& key, int64_t delta) {
  return base_.add(full(key), delta);
}

bool PrefixStore::check(const std::vector<std::string>& keys) { return base_.check(full(keys)); }

void PrefixStore::wait(const std::vector<std::string>& keys, Millis timeout) {
  base_.wait(full(keys), timeout);
}

std::vector<std::optional<std::string>> PrefixStore::getMany(const std::vector<std::string>& keys,
                                                             Millis timeout) {
  return base_.getMany(full(keys), timeout);
}

}  // namespace hora
