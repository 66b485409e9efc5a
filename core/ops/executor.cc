#include "core/ops/executor.h"

#include "core/common/errors.h"
#include "core/ops/ops.h"

namespace hora {
namespace {

using OpFn = void (*)(const Response&, OpContext&);

struct OpRow {
  OpKind kind;
  OpFn run;
};

// Data ops by kind. Join, barrier, errors and process-set changes are handled by the runtime.
constexpr OpRow kOps[] = {
    {OpKind::Allreduce, runAllreduce}, {OpKind::Adasum, runAdasum},
    {OpKind::Allgather, runAllgather}, {OpKind::Broadcast, runBroadcast},
    {OpKind::Alltoall, runAlltoall},   {OpKind::Reducescatter, runReducescatter},
};

OpFn lookup(OpKind kind) {
  for (const auto& row : kOps) {
    if (row.kind == kind) return row.run;
  }
  throwInternal(__FILE__, __LINE__, std::string("no op for ") + opKindName(kind));
}

void completeAll(OpContext& cx, std::exception_ptr error) {
  for (TensorEntry* e : cx.entries) {
    if (e != nullptr) e->handle->complete(error);
  }
}

}  // namespace

void executeResponse(const Response& r, OpContext& cx) {
  OpFn run = lookup(r.kind);
  try {
    run(r, cx);
  } catch (const InvalidArgument& e) {
    // Local to these tensors (e.g. an unsupported dtype for the op): the job goes on. An
    // operation the engine refuses after the ranks agreed on it is an InvalidCollectiveError,
    // as the coordinator's refusals are (response_applier.cc), whichever way it is waited for.
    completeAll(cx, std::make_exception_ptr(InvalidCollectiveError(e.what())));
    return;
  } catch (...) {
    completeAll(cx, std::current_exception());
    throw;
  }
  completeAll(cx, nullptr);
}

}  // namespace hora
