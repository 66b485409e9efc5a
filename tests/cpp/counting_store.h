#pragma once
// Test double: a Store that forwards every call to another one and counts the calls, each of which
// is one request to a real store. For tests of how often a rank asks the store.
//
//   MemoryStore shared;
//   hora::test::CountingStore mine(shared);
//   ...connect through `mine`...
//   EXPECT_LT(mine.requests(), 10);
#include <atomic>
#include <optional>
#include <string>
#include <vector>

#include "core/store/store.h"

namespace hora {
namespace test {

class CountingStore : public Store {
 public:
  explicit CountingStore(Store& inner) : inner_(inner) {}

  void set(const std::string& key, const std::string& value) override {
    ++requests_;
    inner_.set(key, value);
  }
  std::string get(const std::string& key, Millis timeout) override {
    ++requests_;
    return inner_.get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    ++requests_;
    return inner_.add(key, delta);
  }
  bool check(const std::vector<std::string>& keys) override {
    ++requests_;
    return inner_.check(keys);
  }
  void wait(const std::vector<std::string>& keys, Millis timeout) override {
    ++requests_;
    inner_.wait(keys, timeout);
  }
  std::vector<std::optional<std::string>> getMany(const std::vector<std::string>& keys,
                                                  Millis timeout) override {
    ++requests_;
    return inner_.getMany(keys, timeout);
  }

  int requests() const { return requests_.load(); }

 private:
  Store& inner_;
  std::atomic<int> requests_{0};
};

}  // namespace test
}  // namespace hora
