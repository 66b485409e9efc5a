#include "core/coordinator/validation.h"

#include <cctype>
#include <sstream>

#include "core/common/tensor.h"

namespace hora {
namespace {

constexpr size_t kMaxRanksListed = 16;

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

std::vector<int64_t> tail(const std::vector<int64_t>& shape) {
  return shape.empty() ? shape : std::vector<int64_t>(shape.begin() + 1, shape.end());
}

bool isPowerOfTwo(int n) { return n > 0 && (n & (n - 1)) == 0; }

bool anyKind(OpKind) { return true; }
bool sameShapeKind(OpKind k) {
  return k == OpKind::Allreduce || k == OpKind::Adasum || k == OpKind::Broadcast ||
         k == OpKind::Reducescatter;
}
bool rowsKind(OpKind k) { return k == OpKind::Allgather || k == OpKind::Alltoall; }
bool reducingKind(OpKind k) { return k == OpKind::Allreduce || k == OpKind::Reducescatter; }
bool broadcastKind(OpKind k) { return k == OpKind::Broadcast; }
bool processSetKind(OpKind k) {
  return k == OpKind::AddProcessSet || k == OpKind::RemoveProcessSet;
}

// One parameter every rank must submit identically (for the kinds it applies to).
struct AgreementRule {
  const char* what;  // "Mismatched <what> for tensor ..."
  bool namesKind;    // what is prefixed with the op kind: "ALLGATHER tensor shapes"
  bool (*appliesTo)(OpKind);
  bool (*agrees)(const Request& a, const Request& b);
  std::string (*show)(const Request& r);  // this rank's value, for the message
};

std::string showShape(const Request& r) { return shapeString(r.shape); }

// In check order. The first rule fixes the op kind that selects the others.
const AgreementRule kRules[] = {
    {"operations", false, anyKind,
     [](const Request& a, const Request& b) { return a.kind == b.kind; },
     [](const Request& r) { return std::string(opKindName(r.kind)); }},
    {"data types", false, anyKind,
     [](const Request& a, const Request& b) { return a.dtype == b.dtype; },
     [](const Request& r) { return std::string(dtypeName(r.dtype)); }},
    {"CPU/GPU device selection", true, anyKind,
     // Horovod compares CPU against GPU only: each rank drives its own GPU (its local rank's).
     [](const Request& a, const Request& b) { return (a.device < 0) == (b.device < 0); },
     [](const Request& r) {
       return r.device < 0 ? std::string("CPU") : "GPU " + std::to_string(r.device);
     }},
    {"tensor shapes", true, sameShapeKind,
     [](const Request& a, const Request& b) { return a.shape == b.shape; }, showShape},
    {"tensor shapes (all dimensions but the first must match)", true, rowsKind,
     [](const Request& a, const Request& b) {
       return a.shape.size() == b.shape.size() && tail(a.shape) == tail(b.shape);
     },
     showShape},
    {"reduction operations", false, reducingKind,
     [](const Request& a, const Request& b) { return a.reduceOp == b.reduceOp; },
     [](const Request& r) { return std::string(reduceOpName(r.reduceOp)); }},
    {"prescale factors", false, anyKind,
     [](const Request& a, const Request& b) { return a.prescale == b.prescale; },
     [](const Request& r) { return num(r.prescale); }},
    {"postscale factors", false, anyKind,
     [](const Request& a, const Request& b) { return a.postscale == b.postscale; },
     [](const Request& r) { return num(r.postscale); }},
    {"root ranks", true, broadcastKind,
     [](const Request& a, const Request& b) { return a.rootRank == b.rootRank; },
     [](const Request& r) { return std::to_string(r.rootRank); }},
    {"process set arguments", false, processSetKind,
     [](const Request& a, const Request& b) { return a.processSet == b.processSet; },
     [](const Request& r) {
       const auto& args = r.kind == OpKind::AddProcessSet ? r.processSet.ranks
                                                          : std::vector<int32_t>{r.processSet.id};
       return shapeString(std::vector<int64_t>(args.begin(), args.end()));
     }},
};

// "Mismatched <what> for tensor 'x': rank 0: float32, rank 1: int32. Every rank must ..."
Response mismatch(const NegotiationInput& in, const AgreementRule& rule) {
  const auto& reqs = *in.requests;
  const Request& first = reqs.front();
  std::string what = rule.namesKind ? opKindName(first.kind) + std::string(" ") + rule.what
                                    : std::string(rule.what);
  std::ostringstream ranks;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (i == kMaxRanksListed) {
      ranks << ", ...";
      break;
    }
    if (i > 0) ranks << ", ";
    ranks << "rank " << reqs[i].rank << ": " << rule.show(reqs[i]);
  }
  return errorResponse(first.name, first.processSetId, ResponseError::Mismatch,
                       "Mismatched " + what + " for tensor '" + first.name + "': " + ranks.str() +
                           ". Every rank must submit the same " + what + " under one name.");
}

// What the ranks agreed on must also be able to run.
std::optional<Response> checkRunnable(const NegotiationInput& in) {
  const auto& reqs = *in.requests;
  const Request& first = reqs.front();
  const std::string& name = first.name;
  if (in.someRanksJoined && first.kind != OpKind::Allreduce && first.kind != OpKind::Barrier) {
    return joinUnsupportedResponse(name, first.processSetId, first.kind);
  }
  if (first.kind == OpKind::Adasum && !isPowerOfTwo(in.setSize)) {
    return errorResponse(name, first.processSetId, ResponseError::InvalidArgument,
                         "Running Adasum with non-power of 2 ranks is not supported yet (tensor '" +
                             name + "', " + std::to_string(in.setSize) + " ranks).");
  }
  if (first.kind == OpKind::Alltoall) {
    for (const auto& r : reqs) {
      if (static_cast<int>(r.splits.size()) != in.setSize) {
        return errorResponse(name, first.processSetId, ResponseError::InvalidArgument,
                             "Number of entries in splits does not equal number of workers "
                             "(tensor '" +
                                 name + "', rank " + std::to_string(r.rank) + ").");
      }
    }
  }
  return std::nullopt;
}

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

std::optional<Response> checkAgreement(const NegotiationInput& in) {
  const auto& reqs = *in.requests;
  const Request& first = reqs.front();
  for (const AgreementRule& rule : kRules) {
    if (!rule.appliesTo(first.kind)) continue;
    for (const auto& r : reqs) {
      if (!rule.agrees(first, r)) return mismatch(in, rule);
    }
  }
  return checkRunnable(in);
}

}  // namespace hora
