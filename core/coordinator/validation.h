#pragma once
// Builds the response for one tensor name once every rank of its process set has asked for it,
// after checking that the ranks agree. On disagreement it returns an Error response whose message
// names the tensor and lists each rank's value, so every rank can raise the same clear error.
#include <vector>

#include "core/coordinator/messages.h"

namespace hora {

struct NegotiationInput {
  const std::vector<Request>* requests;  // one per contributing rank, ascending set rank
  std::vector<int> setRanks;             // set rank of each request
  int setSize = 1;
  bool someRanksJoined = false;          // joined ranks contribute zeros (allreduce only)
};

Response constructResponse(const NegotiationInput& in);

// Only allreduce (and barrier) run while some ranks have joined.
Response joinUnsupportedResponse(const std::string& name, int processSetId, OpKind kind);

Response errorResponse(const std::string& name, int processSetId, ResponseError code,
                       const std::string& message);

}  // namespace hora
