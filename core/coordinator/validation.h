#pragma once
// Agreement checks of negotiation. Once every rank of a process set has asked for a tensor name,
// the coordinator first checks that the ranks agree and that what they agreed on can run here;
// only then does it build the response (response_builder.h). A failed check is an Error response
// whose message names the tensor and lists each rank's value, so every rank raises the same clear
// error and the job goes on.
#include <optional>
#include <string>
#include <vector>

#include "core/messages/messages.h"

namespace hora {

struct NegotiationInput {
  const std::vector<Request>* requests;  // one per contributing rank (but twinSetRanks), ascending
                                         // set rank
  std::vector<int> setRanks;             // set rank of each request
  // Set ranks that asked with a request equal to (*requests)[0] in all but the rank, not listed in
  // requests; filled where buildResponse reads every rank (readsEveryRank, response_builder.h).
  // Only beside a single request: requests that differ come one per rank.
  std::vector<int> twinSetRanks;
  int setSize = 1;
  bool someRanksJoined = false;  // joined ranks contribute zeros (allreduce only)
};

// Every rank must submit the same op, dtype and device; the same shape (allreduce, adasum,
// broadcast, reducescatter) or the same shape but for the first dimension (allgather, alltoall);
// the same reduction (allreduce, reducescatter), scale factors, root (broadcast) and process-set
// arguments. Then the agreed request must be runnable: only allreduce and barrier run while some
// ranks have joined, Adasum needs a power-of-two set, alltoall one split per rank.
// Returns the Error response of the first failed check, nullopt when all pass.
std::optional<Response> checkAgreement(const NegotiationInput& in);

// Only allreduce (and barrier) run while some ranks have joined.
Response joinUnsupportedResponse(const std::string& name, int processSetId, OpKind kind);

Response errorResponse(const std::string& name, int processSetId, ResponseError code,
                       const std::string& message);

}  // namespace hora
