#pragma once
// Store: the key-value rendezvous through which ranks find each other before any connection
// exists (listening addresses, process-set membership, the generation of each init).
//
// Contract:
// - Values are opaque bytes. set() overwrites. add() treats a missing key as 0 and returns the new
//   value atomically across all clients.
// - Every blocking call takes a timeout and throws TimeoutError naming the missing keys when it
//   runs out (getMany instead returns what it has); IoError when the store is unreachable.
// - Implementations are thread-safe: one Store may be used from several threads at once.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/common/time.h"

namespace hora {

// Who serves a job's rendezvous store: the launcher (horarun, its elastic driver), or rank 0 of a
// job started without one (torchrun, mpirun, Slurm). A rank whose store fails says which.
enum class StoreOwner { Launcher, Rank0 };

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until the key exists, then returns its value.
  virtual std::string get(const std::string& key, Millis timeout) = 0;
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // True when every key exists; never blocks.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  // Blocks until every key exists.
  virtual void wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  // Blocks until every key exists or `timeout` passes, then returns the keys' values in order,
  // nullopt for a key still missing (a timeout of 0 only looks). One request however many keys:
  // a rank that needs every rank's value asks once, not once per rank.
  virtual std::vector<std::optional<std::string>> getMany(const std::vector<std::string>& keys,
                                                          Millis timeout) = 0;
};

}  // namespace hora
