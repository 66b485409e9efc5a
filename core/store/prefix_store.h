#pragma once
// PrefixStore: a view of another Store whose keys all live under "<prefix>/". Used to keep the
// rendezvous of each init generation and of each process set apart in one underlying store.
// Does not own the base store, which must outlive it. Thread-safe when the base store is.
#include <optional>
#include <string>
#include <vector>

#include "core/store/store.h"

namespace hora {

class PrefixStore : public Store {
 public:
  PrefixStore(Store& base, std::string prefix);

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  std::vector<std::optional<std::string>> getMany(const std::vector<std::string>& keys,
                                                  Millis timeout) override;

  const std::string& prefix() const { return prefix_; }

 private:
  std::string full(const std::string& key) const { return prefix_ + "/" + key; }
  std::vector<std::string> full(const std::vector<std::string>& keys) const;

  Store& base_;
  std::string prefix_;
};

}  // namespace hora
