#pragma once
// A ControlChannel that records what the background loop's parts send, for their unit tests.
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "core/common/errors.h"
#include "core/transport/control_channel.h"

namespace hora {

class RecordingChannel : public ControlChannel {
 public:
  RecordingChannel(int rank, int size) : rank_(rank), size_(size) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "recording"; }
  void send(int to, const std::string& bytes) override {
    if (to == failSendsTo) throw IoError("connection to rank " + std::to_string(to) + " closed");
    sent.emplace_back(to, bytes);
  }
  // Hands out what `arriving` holds; throws like a closed connection when it is empty.
  void poll(std::vector<Message>& out, Millis, Micros) override {
    if (arriving.empty()) throw IoError("rank 0 closed the control connection");
    for (auto& m : arriving) out.push_back(m);
    arriving.clear();
  }
  void wakeup() override { ++wakeups; }

  std::vector<std::pair<int, std::string>> sent;
  std::deque<Message> arriving;
  int failSendsTo = -1;  // a rank whose sends fail
  int wakeups = 0;

 private:
  int rank_;
  int size_;
};

}  // namespace hora
