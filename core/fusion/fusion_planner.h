#pragma once
// FusionPlanner: merges compatible single-tensor responses into fused responses that run as one
// collective on one buffer. Allreduce, allgather and reducescatter fuse when they share kind,
// process set, dtype, device, reduction, scale factors and join state, up to `threshold` bytes per
// fused buffer (0 disables fusion). A response may jump over incompatible ones to join an earlier
// group; a group keeps the position of its first member, so order is deterministic. A tensor
// larger than the threshold runs alone.
#include <cstdint>
#include <functional>
#include <vector>

#include "core/messages/messages.h"

namespace hora {

// Bytes a response occupies in a fusion buffer (allgather: the gathered output; alltoall: the
// rows every rank sends).
int64_t fusionBytes(const Response& r, int setSize);

// Tensor i of a (possibly fused) response, as the single response it was planned from.
Response singleResponse(const Response& fused, size_t i, int setSize);
// The same, written into *out (whose storage it reuses: no allocation once it is large enough).
void singleResponseInto(const Response& fused, size_t i, int setSize, Response* out);

// The fused response of `members` (at least one, compatible), in their order: how a rank rebuilds
// a fused cache hit that arrived as slots alone.
Response fuseInOrder(const std::vector<const Response*>& members);

std::vector<Response> planFusion(std::vector<Response> singles, int64_t threshold,
                                 const std::function<int(int processSetId)>& setSize);
// The same plan for responses that stay where they are (cached ones): only the groups are new.
std::vector<Response> planFusion(const std::vector<const Response*>& singles, int64_t threshold,
                                 const std::function<int(int processSetId)>& setSize);

}  // namespace hora
