#pragma once
// SimNetwork: the in-memory control network of the scale simulator. Every rank has an inbox (a
// queue); send() appends the encoded bytes there and counts messages and bytes per sender and
// receiver. A broadcast shares one encoded buffer between the inboxes, as the runtime encodes a
// response batch once and sends the same bytes to every rank.
//
// Single-threaded: the simulator's one thread drives every rank in turn.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hora {
namespace scale {

struct SimMessage {
  int from = 0;
  std::shared_ptr<const std::string> bytes;
};

struct LinkCounters {
  uint64_t messagesSent = 0;
  uint64_t bytesSent = 0;
  uint64_t messagesReceived = 0;
  uint64_t bytesReceived = 0;
};

class SimNetwork {
 public:
  explicit SimNetwork(int size) : inboxes_(size), counters_(size) {}

  int size() const { return static_cast<int>(inboxes_.size()); }
  void send(int from, int to, std::shared_ptr<const std::string> bytes);
  // Everything that arrived for `rank`, oldest first; the inbox is empty afterwards.
  std::vector<SimMessage> drain(int rank);
  const LinkCounters& counters(int rank) const { return counters_[rank]; }
  void resetCounters();

 private:
  std::vector<std::vector<SimMessage>> inboxes_;
  std::vector<LinkCounters> counters_;
};

}  // namespace scale
}  // namespace hora
