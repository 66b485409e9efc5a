#include "core/coordinator/response_builder.h"

#include <algorithm>

namespace hora {
namespace {

int64_t product(std::vector<int64_t>::const_iterator begin,
                std::vector<int64_t>::const_iterator end) {
  int64_t n = 1;
  for (auto it = begin; it != end; ++it) n *= *it;
  return n;
}

int64_t elements(const std::vector<int64_t>& shape) { return product(shape.begin(), shape.end()); }

// Elements in one dim0 row; a scalar never gets here (enqueue refuses it for row kinds).
int64_t rowElements(const std::vector<int64_t>& shape) {
  return shape.empty() ? 1 : product(shape.begin() + 1, shape.end());
}

}  // namespace

Response buildResponse(const NegotiationInput& in) {
  const auto& reqs = *in.requests;
  const Request& first = reqs.front();
  Response resp;
  resp.kind = first.kind;
  resp.names = {first.name};
  resp.processSetId = first.processSetId;
  resp.dtype = first.dtype;
  resp.device = first.device;
  resp.reduceOp = first.reduceOp;
  resp.prescale = first.prescale;
  resp.postscale = first.postscale;
  resp.rootRank = first.rootRank;
  resp.withJoinedRanks = in.someRanksJoined;
  resp.cacheSlots = {-1};
  switch (first.kind) {
    case OpKind::Allreduce:
    case OpKind::Adasum: resp.elementCounts = {elements(first.shape)}; break;
    case OpKind::Reducescatter:
      resp.elementCounts = {elements(first.shape)};
      resp.rowElements = {rowElements(first.shape)};
      break;
    case OpKind::Allgather:
      resp.gatheredRows.assign(in.setSize, 0);
      for (size_t i = 0; i < reqs.size(); ++i) resp.gatheredRows[in.setRanks[i]] = reqs[i].shape[0];
      for (int t : in.twinSetRanks) resp.gatheredRows[t] = first.shape[0];
      resp.rowElements = {rowElements(first.shape)};
      break;
    case OpKind::Alltoall:
      resp.splitsMatrix.assign(static_cast<size_t>(in.setSize) * in.setSize, 0);
      for (size_t i = 0; i < reqs.size(); ++i) {
        for (int j = 0; j < in.setSize; ++j) {
          resp.splitsMatrix[static_cast<size_t>(in.setRanks[i]) * in.setSize + j] =
              reqs[i].splits[j];
        }
      }
      for (int t : in.twinSetRanks) {
        std::copy(first.splits.begin(), first.splits.end(),
                  resp.splitsMatrix.begin() + static_cast<ptrdiff_t>(t) * in.setSize);
      }
      resp.rowElements = {rowElements(first.shape)};
      break;
    case OpKind::AddProcessSet:
    case OpKind::RemoveProcessSet: resp.processSet = first.processSet; break;
    default: break;
  }
  return resp;
}

bool readsEveryRank(OpKind kind) { return kind == OpKind::Allgather || kind == OpKind::Alltoall; }

Response negotiateResponse(const NegotiationInput& in) {
  if (auto error = checkAgreement(in)) return *error;
  return buildResponse(in);
}

}  // namespace hora
