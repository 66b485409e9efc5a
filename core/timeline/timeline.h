#pragma once
// Timeline: a Chrome-trace / Perfetto JSON file of what world rank 0 sees: one row per tensor,
// its negotiation (with a tick per rank as that rank reports ready), then its execution with
// nested activities (queue, fusion memcpy, the transport's collective). The format is in
// docs/timeline.md.
//
// Guarantees:
// - The file is a valid JSON array after every write: each write replaces the closing "]" with
//   the new records and a new "]", so a crash never leaves an unreadable trace.
// - Bounded: recording stops cleanly (with a TIMELINE_TRUNCATED marker) once the file reaches
//   the size cap, and only every Nth step window is recorded when sampling is on. A step begins
//   each time the first tensor name ever negotiated is negotiated again.
// - Every recorded end has its begin: an end whose begin was not recorded (it came before
//   start(), or in a step left out by sampling) is dropped.
// - Cheap when off: every call returns after one atomic load. When on, callers only append to an
//   in-memory queue; a writer thread formats and writes.
//
// Thread-safe: start()/stop() come from frontends, events from the background thread.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/common/time.h"

namespace hora {

struct TimelineOptions {
  std::string path;
  bool markCycles = false;
  int64_t maxBytes = 0;  // 0 = no cap
  int sampleEvery = 1;   // record steps k with k % sampleEvery == 0
};

class Timeline {
 public:
  Timeline() = default;
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Starts writing to options.path (replacing an earlier file); a running timeline is stopped
  // first. Throws IoError when the file cannot be created.
  void start(const TimelineOptions& options);
  void stop();
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  bool markCycles() const { return markCycles_.load(std::memory_order_relaxed); }

  // Negotiation of a tensor (row = name, scoped by process set).
  void negotiateStart(int processSetId, const std::string& name, const char* kind);
  void rankReady(int processSetId, const std::string& name, int setRank);
  void negotiateEnd(int processSetId, const std::string& name);
  // Execution of a tensor: opStart, any number of activityStart/activityEnd pairs, opEnd.
  void opStart(int processSetId, const std::string& name, const char* kind);
  void activityStart(int processSetId, const std::string& name, const std::string& activity);
  void activityEnd(int processSetId, const std::string& name);
  void opEnd(int processSetId, const std::string& name, const std::string& dtype,
             const std::string& shape);
  void cycleStart();

 private:
  struct Event {
    char phase;       // B, E, X, i
    std::string row;  // tensor row; empty = job row (pid 0)
    std::string name;
    std::string args;  // JSON object text or empty
    int64_t ts;
  };
  void push(char phase, std::string row, std::string name, std::string args = {});
  void writerLoop();
  std::string format(const Event& e);
  void writeChunk(const std::string& text);  // appends records, keeps the file valid

  std::atomic<bool> enabled_{false};
  std::atomic<bool> markCycles_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> queue_;
  bool stopping_ = false;
  std::thread writer_;
  TimelineOptions options_;
  Clock::time_point start_;
  // Step sampling, decided on the producer side (background thread) under mu_.
  std::string firstTensor_;
  int64_t step_ = -1;
  bool recordingStep_ = true;
  // Begins recorded and not yet ended, per row: an end is recorded only against one.
  std::unordered_map<std::string, int> openSpans_;
  // Writer-thread state.
  int fd_ = -1;
  int64_t endOffset_ = 0;  // position of the closing "]"
  bool truncated_ = false;
  std::unordered_map<std::string, int> pids_;
};

}  // namespace hora
