#pragma once
// Builds the Response every rank executes for one tensor name from the requests of all ranks,
// after checkAgreement() (validation.h) passed: the common fields from the first request, and per
// kind what execution needs and no single rank knows (each rank's dim0 for allgather, the whole
// splits matrix for alltoall). Fusion of several responses happens later (fusion_planner.h).
#include "core/coordinator/validation.h"

namespace hora {

// Assumes checkAgreement(in) passed.
Response buildResponse(const NegotiationInput& in);

// Whether buildResponse reads every rank's request of this kind (allgather's first dimensions,
// alltoall's splits), so that NegotiationInput::twinSetRanks must be filled.
bool readsEveryRank(OpKind kind);

// checkAgreement, then buildResponse: the Error response or the response to execute.
Response negotiateResponse(const NegotiationInput& in);

}  // namespace hora
