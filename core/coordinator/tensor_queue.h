#pragma once
// TensorQueue: the thread-safe intake between frontends and the background thread.
//
// Contract:
// - push() is called from any thread; it adds a group of entries atomically, or none of them when
//   one name is already in flight in its process set (InvalidArgument, raised in the caller's
//   thread) or the queue is closed (ShutdownError).
// - Every other method is for the background thread. Entries stay owned by the queue until
//   remove(); pointers returned by find() stay valid until then.
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/common/brief_mutex.h"
#include "core/common/tensor.h"
#include "core/common/time.h"
#include "core/coordinator/handle.h"
#include "core/messages/messages.h"

namespace hora {

struct TensorEntry {
  Request request;
  TensorView tensor;  // input; the output too for in-place kinds
  std::shared_ptr<Handle> handle;
  Clock::time_point enqueuedAt;
};

// Names are scoped per process set.
std::string tensorKey(int processSetId, const std::string& name);

class TensorQueue {
 public:
  void push(std::vector<TensorEntry> group);

  // Keys pushed since the last take, in arrival order, into `into` (cleared first). The queue
  // keeps into's old buffer for the next pushes, so that a loop taking into the same vectors
  // allocates nothing once their capacity suits its bursts.
  void takeNew(std::vector<std::string>& into);
  std::vector<std::string> takeNew();
  TensorEntry* find(const std::string& key);
  std::unique_ptr<TensorEntry> remove(const std::string& key);
  // Entries the background thread is done with (`entries` is emptied; null ones are skipped).
  // Their handles are let go at once; the entries are freed by the next push, in a submitting
  // thread: memory freed in another thread than the one that allocated it makes the two queue
  // on the allocator's lock, and leaves the submitting thread's own cache of free blocks empty
  // for its next entries.
  void retire(std::vector<std::unique_ptr<TensorEntry>>& entries);
  // Refuses further pushes with `reason` and returns every entry still in flight.
  std::vector<std::unique_ptr<TensorEntry>> closeAndDrain(const std::string& reason);

 private:
  using EntryMap = std::unordered_map<std::string, std::unique_ptr<TensorEntry>>;
  // An entry's map node, made (allocated) in this thread's own map, outside the lock.
  static EntryMap::node_type makeNode(std::string key, std::unique_ptr<TensorEntry> entry);

  // What push() frees after it lets go of the lock: entries and the map nodes that held them.
  struct Retired {
    std::vector<std::unique_ptr<TensorEntry>> entries;
    std::vector<EntryMap::node_type> nodes;
    void clear() {
      entries.clear();
      nodes.clear();
    }
    void swap(Retired& other) {
      entries.swap(other.entries);
      nodes.swap(other.nodes);
    }
  };

  // Held briefly, by turns, by a submitting thread and the background thread: nothing is
  // allocated or freed under it (map nodes move in and out whole; retired ones wait in
  // retired_, whose vectors trade buffers with push()'s).
  BriefMutex mu_;
  EntryMap inFlight_;
  std::vector<std::string> fresh_;
  Retired retired_;
  bool closed_ = false;
  std::string closedReason_;
};

}  // namespace hora
