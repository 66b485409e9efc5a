#include "bench/scale/sim_network.h"

#include <utility>

namespace hora {
namespace scale {

void SimNetwork::send(int from, int to, std::shared_ptr<const std::string> bytes) {
  const uint64_t n = bytes->size();
  counters_[from].messagesSent += 1;
  counters_[from].bytesSent += n;
  counters_[to].messagesReceived += 1;
  counters_[to].bytesReceived += n;
  inboxes_[to].push_back({from, std::move(bytes)});
}

std::vector<SimMessage> SimNetwork::drain(int rank) {
  std::vector<SimMessage> out;
  out.swap(inboxes_[rank]);
  return out;
}

void SimNetwork::resetCounters() {
  for (auto& c : counters_) c = LinkCounters();
}

}  // namespace scale
}  // namespace hora
