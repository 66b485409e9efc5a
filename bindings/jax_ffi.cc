// hora._core.jax_ffi_targets: the XLA FFI handler through which hora.jax runs collectives
// inside jax.jit. XLA calls it on one of its own threads, without the GIL: it builds the
// engine's requests straight from XLA's buffers, enqueues them as one group (negotiated and
// fused together, like any grouped call), waits, and copies engine-allocated results into
// XLA's result buffers. Nothing of JAX or XLA is linked: XLA hands its API table in each call
// frame (bindings/xla_call.h).
//
// The custom call's operands are (token, tensors...) and its results (token, outputs...): the
// token chain that hora.jax threads through every call keeps them in program order on every
// rank. Attributes: kind, reduce_op, prescale, postscale, root_rank, process_set_id, names
// (one per tensor, joined by '\n'; one for a barrier) and call_site.
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "bindings/errors.h"
#include "bindings/py_handle.h"
#include "bindings/register.h"
#include "bindings/xla_call.h"
#include "core/common/errors.h"
#include "core/messages/messages.h"
#include "core/runtime.h"

namespace py = pybind11;

namespace hora::bindings {
namespace {

std::vector<std::string> splitNames(std::string_view joined) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    size_t end = joined.find('\n', start);
    names.emplace_back(joined.substr(start, end == std::string_view::npos ? end : end - start));
    if (end == std::string_view::npos) return names;
    start = end + 1;
  }
}

bool inPlace(OpKind kind) {
  return kind == OpKind::Allreduce || kind == OpKind::Adasum || kind == OpKind::Broadcast;
}

TensorView viewOf(const XLA_FFI_Buffer& buffer) {
  TensorView view;
  view.data = buffer.data;
  view.dtype = hostDataType(buffer.dtype);
  view.shape = shapeOf(buffer);
  return view;
}

// The engine wrote a result whose shape XLA fixed at trace time; they differ when the ranks'
// shapes differ in a way only the engine sees (allgather's or alltoall's first dimensions).
void copyOutput(const Handle& handle, const XLA_FFI_Buffer& out, const std::string& name,
                OpKind kind) {
  const OutputTensor& result = handle.output;
  std::vector<int64_t> expected = shapeOf(out);
  if (result.shape != expected) {
    throw InvalidArgument(std::string(opKindName(kind)) + " of '" + name + "' inside jax.jit " +
                          "produced shape " + shapeString(result.shape) + " where the traced " +
                          "program expects " + shapeString(expected) + ": inside jit every " +
                          "rank must pass the same shape (equal splits for alltoall)");
  }
  size_t bytes = byteSize(out);
  if (bytes > 0) std::memcpy(out.data, result.storage.get(), bytes);
}

void runCollective(const XlaCall& call) {
  std::shared_ptr<Runtime> rt = currentRuntime();
  if (!rt) {
    throw ShutdownError("Hora is not initialized (hora.jax.init() first, or after shutdown)");
  }
  const auto kind = static_cast<OpKind>(call.intAttr("kind"));
  std::vector<std::string> names = splitNames(call.stringAttr("names"));
  // Operand 0 and result 0 are the ordering token.
  const size_t tensors = call.argCount() - 1;
  const bool barrier = kind == OpKind::Barrier;
  const size_t n = barrier ? 1 : tensors;
  if (names.size() != n || call.retCount() != tensors + 1) {
    throw InternalError("a Hora custom call has " + std::to_string(names.size()) + " names, " +
                        std::to_string(tensors) + " operands and " +
                        std::to_string(call.retCount() - 1) + " results");
  }

  OpRequest base;
  base.request.kind = kind;
  base.request.processSetId = static_cast<int32_t>(call.intAttr("process_set_id"));
  base.request.reduceOp = static_cast<ReduceOp>(call.intAttr("reduce_op"));
  base.request.prescale = call.floatAttr("prescale");
  base.request.postscale = call.floatAttr("postscale");
  base.request.rootRank = static_cast<int32_t>(call.intAttr("root_rank"));
  base.request.callSite = std::string(call.stringAttr("call_site"));
  std::vector<OpRequest> requests(n, base);
  for (size_t i = 0; i < n; ++i) {
    requests[i].request.name = names[i];
    if (barrier) continue;
    const XLA_FFI_Buffer& in = call.arg(i + 1);
    const XLA_FFI_Buffer& out = call.ret(i + 1);
    if (inPlace(kind)) {
      // The engine works in place on XLA's result buffer (the same memory as the operand when
      // XLA honours the alias the lowering asks for).
      if (out.data != in.data && byteSize(in) > 0) std::memcpy(out.data, in.data, byteSize(in));
      requests[i].tensor = viewOf(out);
    } else {
      requests[i].tensor = viewOf(in);
    }
  }

  // This thread waits at once: it drives the work itself where callers drive.
  std::vector<std::shared_ptr<Handle>> handles = rt->enqueue(std::move(requests), true);
  {
    // No bound of its own, like an eager wait: a dead peer or shutdown fails the handles within
    // HORA_TIMEOUT_SECONDS, and ranks blocked on each other end as a reported deadlock.
    bool driven = std::all_of(handles.begin(), handles.end(),
                              [](const std::shared_ptr<Handle>& h) { return h->driven(); });
    BlockedScope blocked(rt.get(), driven);
    for (const auto& handle : handles) handle->wait(std::nullopt);
  }
  for (size_t i = 0; i < handles.size(); ++i) {
    handles[i]->rethrowIfFailed();
    if (!barrier && !inPlace(kind)) copyOutput(*handles[i], call.ret(i + 1), names[i], kind);
  }
}

XLA_FFI_Error_Code xlaCode(ErrorCode code) {
  switch (code) {
    case ErrorCode::InvalidArgument:
    case ErrorCode::InvalidCollective: return XLA_FFI_Error_Code_INVALID_ARGUMENT;
    case ErrorCode::Mismatch: return XLA_FFI_Error_Code_FAILED_PRECONDITION;
    case ErrorCode::Timeout: return XLA_FFI_Error_Code_DEADLINE_EXCEEDED;
    case ErrorCode::Io:
    case ErrorCode::Shutdown: return XLA_FFI_Error_Code_UNAVAILABLE;
    case ErrorCode::NotSupported: return XLA_FFI_Error_Code_UNIMPLEMENTED;
    case ErrorCode::Internal: return XLA_FFI_Error_Code_INTERNAL;
  }
  return XLA_FFI_Error_Code_INTERNAL;
}

// The message starts with the Python class the eager path would raise, "hora.errors.<Class>: "
// (or "ValueError: "), which hora.jax reads to raise that class again.
std::string tagged(ErrorCode code, const char* what) {
  const char* cls = errorClassName(code);
  return std::string(cls == nullptr ? "ValueError" : std::string("hora.errors.") + cls) + ": " +
         what;
}

// The handler XLA calls. No exception may cross into XLA.
extern "C" XLA_FFI_Error* horaCollective(XLA_FFI_CallFrame* frame) {
  try {
    if (answerMetadataQuery(frame)) return nullptr;
    XlaCall call(frame);
    runCollective(call);
    return nullptr;
  } catch (const Error& e) {
    return xlaError(frame, xlaCode(e.code()), tagged(e.code(), e.what()));
  } catch (const std::exception& e) {
    return xlaError(frame, XLA_FFI_Error_Code_INTERNAL, tagged(ErrorCode::Internal, e.what()));
  } catch (...) {
    return xlaError(frame, XLA_FFI_Error_Code_INTERNAL,
                    tagged(ErrorCode::Internal, "unknown exception in a Hora custom call"));
  }
}

}  // namespace

void registerJaxFfi(py::module_& m) {
  m.def(
      "jax_ffi_targets",
      [] {
        py::dict targets;
        // An unnamed capsule holding the handler's address: what jax.ffi.register_ffi_target
        // takes (jax.ffi.pycapsule makes the same).
        targets["hora_collective"] = py::capsule(reinterpret_cast<void*>(&horaCollective));
        return targets;
      },
      "XLA FFI handlers for hora.jax inside jax.jit: {target name: PyCapsule}, for "
      "jax.ffi.register_ffi_target(name, capsule, platform=\"cpu\") (XLA FFI API 0.3).");
}

}  // namespace hora::bindings
