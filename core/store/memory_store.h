#pragma once
// MemoryStore: a Store inside one process, for tests that run ranks as threads. A mutex guards the
// map; blocked get()/wait() calls sleep on a condition variable that every set()/add() notifies.
// Thread-safe. Timeouts as in Store (TimeoutError naming the missing keys).
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/store/store.h"

namespace hora {

class MemoryStore : public Store {
 public:
  MemoryStore() = default;

  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Millis timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, Millis timeout) override;
  std::vector<std::optional<std::string>> getMany(const std::vector<std::string>& keys,
                                                  Millis timeout) override;

 private:
  std::vector<std::string> missingLocked(const std::vector<std::string>& keys) const;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

// Shared by the stores: the text of a TimeoutError for keys that never appeared.
std::string storeTimeoutMessage(const std::vector<std::string>& missing, Millis timeout);
// add() keeps counters as decimal text; a value that is not an integer is an InvalidArgument.
int64_t parseCounter(const std::string& key, const std::string& value);

}  // namespace hora
