#include "core/fusion/fusion_planner.h"

namespace hora {
namespace {

bool fusible(OpKind k) {
  return k == OpKind::Allreduce || k == OpKind::Allgather || k == OpKind::Reducescatter;
}

bool compatible(const Response& a, const Response& b) {
  return a.kind == b.kind && a.processSetId == b.processSetId && a.dtype == b.dtype &&
         a.device == b.device && a.reduceOp == b.reduceOp && a.prescale == b.prescale &&
         a.postscale == b.postscale && a.withJoinedRanks == b.withJoinedRanks;
}

void append(Response& group, const Response& r) {
  group.names.insert(group.names.end(), r.names.begin(), r.names.end());
  group.elementCounts.insert(group.elementCounts.end(), r.elementCounts.begin(),
                             r.elementCounts.end());
  group.gatheredRows.insert(group.gatheredRows.end(), r.gatheredRows.begin(), r.gatheredRows.end());
  group.rowElements.insert(group.rowElements.end(), r.rowElements.begin(), r.rowElements.end());
  group.cacheSlots.insert(group.cacheSlots.end(), r.cacheSlots.begin(), r.cacheSlots.end());
  group.cacheHit = group.cacheHit && r.cacheHit;
}

}  // namespace

Response fuseInOrder(const std::vector<const Response*>& members) {
  Response fused = *members.front();
  for (size_t i = 1; i < members.size(); ++i) append(fused, *members[i]);
  return fused;
}

void singleResponseInto(const Response& fused, size_t i, int setSize, Response* out) {
  if (fused.names.size() == 1) {
    *out = fused;
    return;
  }
  // Field by field: copying the fused response whole would copy every tensor's entries per
  // tensor. Assigning reuses what `out` already holds.
  Response& r = *out;
  r.kind = fused.kind;
  r.processSetId = fused.processSetId;
  r.dtype = fused.dtype;
  r.device = fused.device;
  r.reduceOp = fused.reduceOp;
  r.prescale = fused.prescale;
  r.postscale = fused.postscale;
  r.rootRank = fused.rootRank;
  r.withJoinedRanks = fused.withJoinedRanks;
  r.cacheHit = fused.cacheHit;
  auto one = [i](auto& to, const auto& all, size_t per) {
    if (all.empty()) {
      to.clear();
    } else {
      to.assign(all.begin() + i * per, all.begin() + (i + 1) * per);
    }
  };
  one(r.names, fused.names, 1);
  one(r.elementCounts, fused.elementCounts, 1);
  one(r.rowElements, fused.rowElements, 1);
  one(r.gatheredRows, fused.gatheredRows, static_cast<size_t>(setSize));
  one(r.cacheSlots, fused.cacheSlots, 1);
  // Never part of a fused response.
  r.splitsMatrix.clear();
  r.processSet = ProcessSetChange();
  r.lastJoinedRank = -1;
  r.errorCode = ResponseError::None;
  r.errorMessage.clear();
}

Response singleResponse(const Response& fused, size_t i, int setSize) {
  Response r;
  singleResponseInto(fused, i, setSize, &r);
  return r;
}

int64_t fusionBytes(const Response& r, int setSize) {
  int64_t elements = 0;
  if (r.kind == OpKind::Allgather) {
    for (size_t t = 0; t < r.names.size(); ++t) {
      int64_t rows = 0;
      for (int i = 0; i < setSize; ++i) rows += r.gatheredRows[t * setSize + i];
      elements += rows * r.rowElements[t];
    }
  } else if (r.kind == OpKind::Alltoall) {
    int64_t rows = 0;
    for (int64_t n : r.splitsMatrix) rows += n;
    elements = r.rowElements.empty() ? 0 : rows * r.rowElements.front();
  } else {
    for (int64_t n : r.elementCounts) elements += n;
  }
  return elements * static_cast<int64_t>(dtypeSize(r.dtype));
}

namespace {

// Greedy, in order: each response not yet placed starts a group and takes every later compatible
// one that still fits under the threshold. at(i) reads single i; take(i) gives it as a group's
// start (moved or copied).
template <typename At, typename Take>
std::vector<Response> planGroups(size_t count, At at, Take take, int64_t threshold,
                                 const std::function<int(int processSetId)>& setSize) {
  std::vector<Response> out;
  std::vector<bool> used(count, false);
  for (size_t i = 0; i < count; ++i) {
    if (used[i]) continue;
    used[i] = true;
    Response group = take(i);
    if (fusible(group.kind)) {
      int n = setSize(group.processSetId);
      int64_t bytes = fusionBytes(group, n);
      for (size_t j = i + 1; j < count && bytes < threshold; ++j) {
        if (used[j] || !compatible(group, at(j))) continue;
        int64_t more = fusionBytes(at(j), n);
        if (bytes + more > threshold) continue;
        append(group, at(j));
        bytes += more;
        used[j] = true;
      }
    }
    out.push_back(std::move(group));
  }
  return out;
}

}  // namespace

std::vector<Response> planFusion(std::vector<Response> singles, int64_t threshold,
                                 const std::function<int(int processSetId)>& setSize) {
  if (threshold <= 0) return singles;
  return planGroups(
      singles.size(), [&](size_t i) -> const Response& { return singles[i]; },
      [&](size_t i) { return std::move(singles[i]); }, threshold, setSize);
}

std::vector<Response> planFusion(const std::vector<const Response*>& singles, int64_t threshold,
                                 const std::function<int(int processSetId)>& setSize) {
  // A threshold of 0 or less lets no group take a second response: each runs alone.
  return planGroups(
      singles.size(), [&](size_t i) -> const Response& { return *singles[i]; },
      [&](size_t i) { return *singles[i]; }, threshold, setSize);
}

}  // namespace hora
