#include "core/timeline/timeline.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/common/errors.h"
#include "core/common/logging.h"

namespace hora {
namespace {

std::string jsonEscape(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string rowName(int processSetId, const std::string& name) {
  return processSetId == 0 ? name : name + " [ps " + std::to_string(processSetId) + "]";
}

void writeAll(int fd, const std::string& text, int64_t offset) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::pwrite(fd, text.data() + done, text.size() - done, offset + done);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError(std::string("timeline write failed: ") + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

Timeline::~Timeline() { stop(); }

void Timeline::start(const TimelineOptions& options) {
  stop();
  int fd = ::open(options.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw IoError("cannot create timeline file " + options.path + ": " + std::strerror(errno));
  }
  std::lock_guard<std::mutex> lock(mu_);
  fd_ = fd;
  options_ = options;
  if (options_.sampleEvery < 1) options_.sampleEvery = 1;
  start_ = Clock::now();
  stopping_ = false;
  truncated_ = false;
  pids_.clear();
  openSpans_.clear();
  firstTensor_.clear();
  step_ = -1;
  recordingStep_ = true;
  auto sinceEpoch = std::chrono::duration_cast<std::chrono::microseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
  std::string header =
      "[\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"name\":\"hora\","
      "\"start_time_since_epoch_in_micros\":" +
      std::to_string(sinceEpoch) +
      "}},\n"
      "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":0,\"tid\":0,\"args\":{\"sort_index\":"
      "0}}]";
  writeAll(fd_, header, 0);
  endOffset_ = static_cast<int64_t>(header.size()) - 1;
  markCycles_ = options.markCycles;
  writer_ = std::thread([this, rank = currentLogRank()] {
    LogRankScope logRank(rank);
    writerLoop();
  });
  enabled_ = true;
}

void Timeline::stop() {
  enabled_ = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void Timeline::push(char phase, std::string row, std::string name, std::string args) {
  int64_t ts = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (phase == 'E') {
      // Only the end of a recorded begin: a span that began before start() or in a step left
      // out by sampling has none, and a span begun in a recorded step still closes.
      auto open = openSpans_.find(row);
      if (open == openSpans_.end()) return;
      if (--open->second == 0) openSpans_.erase(open);
    } else if (!recordingStep_ && phase != 'S') {
      return;
    } else if (phase == 'B') {
      ++openSpans_[row];
    }
    if (phase == 'S') phase = 'i';
    queue_.push_back(Event{phase, std::move(row), std::move(name), std::move(args), ts});
  }
  cv_.notify_one();
}

void Timeline::negotiateStart(int processSetId, const std::string& name, const char* kind) {
  if (!enabled()) return;
  std::string row = rowName(processSetId, name);
  int64_t newStep = -1;
  {
    // Step windows: the first tensor ever negotiated opens each new step.
    std::lock_guard<std::mutex> lock(mu_);
    if (firstTensor_.empty()) firstTensor_ = row;
    if (row == firstTensor_) {
      newStep = ++step_;
      recordingStep_ = step_ % options_.sampleEvery == 0;
    }
  }
  if (newStep >= 0) push('S', "", "STEP", "{\"step\":" + std::to_string(newStep) + "}");
  push('B', row, std::string("NEGOTIATE_") + kind);
}

void Timeline::rankReady(int processSetId, const std::string& name, int setRank) {
  if (!enabled()) return;
  push('X', rowName(processSetId, name), std::to_string(setRank));
}

void Timeline::negotiateEnd(int processSetId, const std::string& name) {
  if (!enabled()) return;
  push('E', rowName(processSetId, name), "");
}

void Timeline::opStart(int processSetId, const std::string& name, const char* kind) {
  if (!enabled()) return;
  push('B', rowName(processSetId, name), kind);
}

void Timeline::activityStart(int processSetId, const std::string& name,
                             const std::string& activity) {
  if (!enabled()) return;
  push('B', rowName(processSetId, name), activity);
}

void Timeline::activityEnd(int processSetId, const std::string& name) {
  if (!enabled()) return;
  push('E', rowName(processSetId, name), "");
}

void Timeline::opEnd(int processSetId, const std::string& name, const std::string& dtype,
                     const std::string& shape) {
  if (!enabled()) return;
  push('E', rowName(processSetId, name), "",
       "{\"dtype\":\"" + dtype + "\",\"shape\":\"" + shape + "\"}");
}

void Timeline::cycleStart() {
  if (!enabled() || !markCycles()) return;
  push('i', "", "CYCLE_START");
}

std::string Timeline::format(const Event& e) {
  std::string out;
  int pid = 0;
  if (!e.row.empty()) {
    auto it = pids_.find(e.row);
    if (it == pids_.end()) {
      pid = static_cast<int>(pids_.size()) + 1;
      pids_.emplace(e.row, pid);
      std::string p = std::to_string(pid);
      out += ",\n{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + p +
             ",\"tid\":0,\"args\":{\"name\":\"" + jsonEscape(e.row) + "\"}}";
      out += ",\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + p +
             ",\"tid\":0,\"args\":{\"sort_index\":" + p + "}}";
    } else {
      pid = it->second;
    }
  }
  out += ",\n{\"ph\":\"";
  out += e.phase;
  out += "\"";
  if (!e.name.empty() || e.phase != 'E') out += ",\"name\":\"" + jsonEscape(e.name) + "\"";
  out += ",\"ts\":" + std::to_string(e.ts);
  if (e.phase == 'X') out += ",\"dur\":0";
  if (e.phase == 'i') out += ",\"s\":\"g\"";
  out += ",\"pid\":" + std::to_string(pid) + ",\"tid\":0";
  if (!e.args.empty()) out += ",\"args\":" + e.args;
  out += "}";
  return out;
}

void Timeline::writeChunk(const std::string& text) {
  if (truncated_ || text.empty()) return;
  std::string body = text;
  if (options_.maxBytes > 0 && endOffset_ + static_cast<int64_t>(body.size()) > options_.maxBytes) {
    truncated_ = true;
    int64_t ts =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start_).count();
    body = ",\n{\"ph\":\"i\",\"name\":\"TIMELINE_TRUNCATED\",\"ts\":" + std::to_string(ts) +
           ",\"s\":\"g\",\"pid\":0,\"tid\":0,\"args\":{\"max_mb\":" +
           std::to_string(options_.maxBytes >> 20) + "}}";
    HORA_LOG(Warning, "timeline reached its size cap (" << (options_.maxBytes >> 20)
                                                        << " MB); recording stops here");
  }
  writeAll(fd_, body + "]", endOffset_);
  endOffset_ += static_cast<int64_t>(body.size());
}

void Timeline::writerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    std::deque<Event> batch;
    batch.swap(queue_);
    bool done = stopping_;
    lock.unlock();
    std::string text;
    for (const auto& e : batch) text += format(e);
    try {
      writeChunk(text);
    } catch (const std::exception& ex) {
      HORA_LOG(Error, ex.what() << "; the timeline stops");
      truncated_ = true;
    }
    lock.lock();
    if (done && queue_.empty()) return;
  }
}

}  // namespace hora
