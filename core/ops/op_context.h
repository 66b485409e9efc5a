#pragma once
// What an op needs to execute one (possibly fused) response on this rank.
#include <cstdint>
#include <vector>

#include "core/coordinator/tensor_queue.h"
#include "core/fusion/fusion_buffer.h"
#include "core/messages/messages.h"
#include "core/timeline/timeline.h"
#include "core/transport/communicator.h"

namespace hora {

struct OpContext {
  Communicator& comm;  // the process set's communicator
  FusionBuffer& fusion;
  const std::vector<int>& setRanks;  // world rank of each set rank
  // One per tensor of the response, in order; nullptr where this rank joined and contributes
  // zeros (allreduce only).
  std::vector<TensorEntry*> entries;
  Timeline* timeline = nullptr;  // null or disabled: no activities recorded
  // Every rank's data for this allreduce, in rank order, published with the agreement round that
  // ran it (foldsFromPayloads, ops.h): folded instead of exchanged. Null for none.
  const std::vector<const uint8_t*>* payloads = nullptr;
};

// A collective's activity, named after the transport that runs it ("TCP_ALLREDUCE").
struct TransportActivity {
  const char* op;
};

// Records an activity on every tensor of a response for as long as it lives. The activity's name
// is made only while the timeline records: an op pays nothing for it otherwise.
class ActivityScope {
 public:
  ActivityScope(OpContext& cx, const Response& r, const char* activity);
  ActivityScope(OpContext& cx, const Response& r, TransportActivity collective);
  ~ActivityScope();
  ActivityScope(const ActivityScope&) = delete;
  ActivityScope& operator=(const ActivityScope&) = delete;

 private:
  void start(const std::string& activity);

  Timeline* timeline_;
  const Response& r_;
};

// "TCP_ALLREDUCE": the transport's name and the collective, as activities are named.
std::string collectiveActivity(const OpContext& cx, const char* op);

}  // namespace hora
