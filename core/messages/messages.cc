#include "core/messages/messages.h"

namespace hora {

const char* opKindName(OpKind k) {
  switch (k) {
    case OpKind::Allreduce: return "ALLREDUCE";
    case OpKind::Allgather: return "ALLGATHER";
    case OpKind::Broadcast: return "BROADCAST";
    case OpKind::Join: return "JOIN";
    case OpKind::Adasum: return "ADASUM";
    case OpKind::Alltoall: return "ALLTOALL";
    case OpKind::Barrier: return "BARRIER";
    case OpKind::Reducescatter: return "REDUCESCATTER";
    case OpKind::Error: return "ERROR";
    case OpKind::AddProcessSet: return "ADD_PROCESS_SET";
    case OpKind::RemoveProcessSet: return "REMOVE_PROCESS_SET";
  }
  return "UNKNOWN";
}

bool isDataOp(OpKind k) {
  switch (k) {
    case OpKind::Allreduce:
    case OpKind::Adasum:
    case OpKind::Allgather:
    case OpKind::Broadcast:
    case OpKind::Alltoall:
    case OpKind::Reducescatter: return true;
    default: return false;
  }
}

bool Request::sameParams(const Request& o) const {
  return kind == o.kind && processSetId == o.processSetId && dtype == o.dtype && shape == o.shape &&
         device == o.device && reduceOp == o.reduceOp && prescale == o.prescale &&
         postscale == o.postscale && rootRank == o.rootRank && splits == o.splits &&
         processSet == o.processSet;
}

}  // namespace hora
