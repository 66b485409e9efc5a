#include "core/coordinator/validation.h"

#include <cctype>
#include <functional>
#include <sstream>

#include "core/common/tensor.h"

namespace hora {
namespace {

constexpr size_t kMaxRanksListed = 16;

// "rank 0: float32, rank 1: int32, ..." over every contributing rank.
std::string perRank(const NegotiationInput& in, const std::function<std::string(const Request&)>& f) {
  std::ostringstream os;
  const auto& reqs = *in.requests;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (i == kMaxRanksListed) {
      os << ", ...";
      break;
    }
    if (i > 0) os << ", ";
    os << "rank " << reqs[i].rank << ": " << f(reqs[i]);
  }
  return os.str();
}

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::vector<int64_t> tail(const std::vector<int64_t>& shape) {
  return shape.empty() ? shape : std::vector<int64_t>(shape.begin() + 1, shape.end());
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (auto d : v) n *= d;
  return n;
}

bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

}  // namespace

Response errorResponse(const std::string& name, int processSetId, ResponseError code,
                       const std::string& message) {
  Response r;
  r.kind = OpKind::Error;
  r.names = {name};
  r.processSetId = processSetId;
  r.errorCode = code;
  r.errorMessage = message;
  return r;
}

Response joinUnsupportedResponse(const std::string& name, int processSetId, OpKind kind) {
  std::string k = opKindName(kind);  // "ALLGATHER" -> "Allgather"
  for (size_t i = 1; i < k.size(); ++i) k[i] = static_cast<char>(std::tolower(k[i]));
  return errorResponse(name, processSetId, ResponseError::InvalidArgument,
                       k + " is not supported with Join at this time (tensor '" + name +
                           "'). Only allreduce runs while some ranks have joined; specify "
                           "sparse_as_dense=True if using DistributedOptimizer.");
}

Response constructResponse(const NegotiationInput& in) {
  const auto& reqs = *in.requests;
  const Request& first = reqs.front();
  const std::string& name = first.name;
  auto mismatch = [&](const std::string& what,
                      const std::function<std::string(const Request&)>& f) {
    return errorResponse(name, first.processSetId, ResponseError::Mismatch,
                         "Mismatched " + what + " for tensor '" + name + "': " + perRank(in, f) +
                             ". Every rank must submit the same " + what + " under one name.");
  };
  auto differs = [&](const std::function<bool(const Request&)>& same) {
    for (const auto& r : reqs) {
      if (!same(r)) return true;
    }
    return false;
  };

  if (differs([&](const Request& r) { return r.kind == first.kind; })) {
    return mismatch("operations", [](const Request& r) { return opKindName(r.kind); });
  }
  const OpKind kind = first.kind;
  const std::string kindName = opKindName(kind);
  if (differs([&](const Request& r) { return r.dtype == first.dtype; })) {
    return mismatch("data types", [](const Request& r) { return dtypeName(r.dtype); });
  }
  if (differs([&](const Request& r) { return r.device == first.device; })) {
    return mismatch(kindName + " CPU/GPU device selection", [](const Request& r) {
      return r.device < 0 ? std::string("CPU") : "GPU " + std::to_string(r.device);
    });
  }
  auto shapeOf = [](const Request& r) { return shapeString(r.shape); };
  bool sameShapeRequired = kind == OpKind::Allreduce || kind == OpKind::Adasum ||
                           kind == OpKind::Broadcast || kind == OpKind::Reducescatter;
  if (sameShapeRequired && differs([&](const Request& r) { return r.shape == first.shape; })) {
    return mismatch(kindName + " tensor shapes", shapeOf);
  }
  if (kind == OpKind::Allgather || kind == OpKind::Alltoall) {
    if (differs([&](const Request& r) { return r.shape.size() == first.shape.size(); }) ||
        differs([&](const Request& r) { return tail(r.shape) == tail(first.shape); })) {
      return mismatch(kindName + " tensor shapes (all dimensions but the first must match)",
                      shapeOf);
    }
  }
  bool reduces = kind == OpKind::Allreduce || kind == OpKind::Reducescatter;
  if (reduces && differs([&](const Request& r) { return r.reduceOp == first.reduceOp; })) {
    return mismatch("reduction operations", [](const Request& r) { return reduceOpName(r.reduceOp); });
  }
  if (differs([&](const Request& r) { return r.prescale == first.prescale; })) {
    return mismatch("prescale factors", [](const Request& r) { return num(r.prescale); });
  }
  if (differs([&](const Request& r) { return r.postscale == first.postscale; })) {
    return mismatch("postscale factors", [](const Request& r) { return num(r.postscale); });
  }
  if (kind == OpKind::Broadcast &&
      differs([&](const Request& r) { return r.rootRank == first.rootRank; })) {
    return mismatch("BROADCAST root ranks", [](const Request& r) { return std::to_string(r.rootRank); });
  }
  if ((kind == OpKind::AddProcessSet || kind == OpKind::RemoveProcessSet) &&
      differs([&](const Request& r) { return r.processSet == first.processSet; })) {
    return mismatch("process set arguments", [](const Request& r) {
      const auto& args = r.kind == OpKind::AddProcessSet ? r.processSet.ranks
                                                         : std::vector<int32_t>{r.processSet.id};
      return shapeString(std::vector<int64_t>(args.begin(), args.end()));
    });
  }

  if (in.someRanksJoined && kind != OpKind::Allreduce && kind != OpKind::Barrier) {
    return joinUnsupportedResponse(name, first.processSetId, kind);
  }
  if (kind == OpKind::Adasum) {
    if (!isPowerOfTwo(in.setSize)) {
      return errorResponse(name, first.processSetId, ResponseError::InvalidArgument,
                           "Running Adasum with non-power of 2 ranks is not supported yet (tensor '" +
                               name + "', " + std::to_string(in.setSize) + " ranks).");
    }
  }

  Response resp;
  resp.kind = kind;
  resp.names = {name};
  resp.processSetId = first.processSetId;
  resp.dtype = first.dtype;
  resp.device = first.device;
  resp.reduceOp = first.reduceOp;
  resp.prescale = first.prescale;
  resp.postscale = first.postscale;
  resp.rootRank = first.rootRank;
  resp.withJoinedRanks = in.someRanksJoined;
  resp.cacheSlots = {-1};
  switch (kind) {
    case OpKind::Allreduce:
    case OpKind::Adasum:
      resp.elementCounts = {product(first.shape)};
      break;
    case OpKind::Reducescatter:
      resp.elementCounts = {product(first.shape)};
      resp.rowElements = {product(tail(first.shape))};
      break;
    case OpKind::Allgather:
      resp.gatheredRows.assign(in.setSize, 0);
      for (size_t i = 0; i < reqs.size(); ++i) resp.gatheredRows[in.setRanks[i]] = reqs[i].shape[0];
      resp.rowElements = {product(tail(first.shape))};
      break;
    case OpKind::Alltoall:
      resp.splitsMatrix.assign(static_cast<size_t>(in.setSize) * in.setSize, 0);
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (static_cast<int>(reqs[i].splits.size()) != in.setSize) {
          return errorResponse(name, first.processSetId, ResponseError::InvalidArgument,
                               "Number of entries in splits does not equal number of workers "
                               "(tensor '" + name + "', rank " + std::to_string(reqs[i].rank) + ").");
        }
        for (int j = 0; j < in.setSize; ++j) {
          resp.splitsMatrix[static_cast<size_t>(in.setRanks[i]) * in.setSize + j] = reqs[i].splits[j];
        }
      }
      resp.rowElements = {product(tail(first.shape))};
      break;
    case OpKind::AddProcessSet:
    case OpKind::RemoveProcessSet:
      resp.processSet = first.processSet;
      break;
    default:
      break;
  }
  return resp;
}

}  // namespace hora
