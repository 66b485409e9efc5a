// hora._core.submit: the one way a frontend's request enters the engine from Python.
//
//   submit(kind, tensors, names, *, op=SUM, prescale=1.0, postscale=1.0, root_rank=0,
//          splits=None, process_set_id=0, hora_frames=0, waits=False, copy=False)
//     -> [Handle, ...]
//
// (A blocking call, `waits`, of an operation that writes into its buffers returns []; with `copy`
// it returns the results, one DLPack capsule per tensor.)
// It turns the call into EnqueueArgs (each tensor exported through DLPack, the user's call site
// found on the stack) and enqueues them as one group; every rule about the request is checked
// by the engine (core/coordinator/enqueue_checks.cc), which raises Horovod's errors. Nothing here
// calls back into Hora's Python: frontends hand over what DLPack can import (a capsule, a NumPy
// array or any object with __dlpack__).
//
// A plain CPython function (METH_FASTCALL | METH_KEYWORDS) rather than a pybind11 one: a
// backward pass submits hundreds of times, and pybind11's keyword matching would cost most of a
// microsecond of each call; this parser compares interned keyword names by address.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings/call_site.h"
#include "bindings/dlpack.h"
#include "bindings/errors.h"
#include "bindings/py_handle.h"
#include "bindings/register.h"
#include "core/common/errors.h"
#include "core/coordinator/enqueue_checks.h"
#include "core/coordinator/process_set_table.h"
#include "core/messages/messages.h"
#include "core/runtime.h"
#include "core/transport/capabilities.h"

namespace py = pybind11;

namespace hora::bindings {
namespace {

constexpr const char* kBfloat16 = "bfloat16";

// One group of requests as Python gave it. GIL held while it lives.
struct EnqueueArgs {
  int kind = 0;
  std::vector<py::object> tensors;  // DLPack producers or capsules; none for join/barrier
  std::vector<std::string> names;   // one per tensor (one for join/barrier)
  int processSetId = 0;
  int reduceOp = 1;
  double prescale = 1.0;
  double postscale = 1.0;
  int rootRank = 0;
  py::object splits = py::none();
  std::string callSite;
  std::vector<std::optional<std::string>> dtypeOverrides;  // empty, or one per tensor
  bool waits = false;  // a blocking call: submit waits for the handles (Runtime::enqueue)
  bool copy = false;   // the operation works on a copy of each tensor (an out-of-place call)
};

std::vector<int32_t> toSplits(const py::object& splits) {
  std::vector<int32_t> out;
  if (splits.is_none()) return out;
  for (py::handle item : splits) {
    auto v = py::cast<long long>(py::int_(py::reinterpret_borrow<py::object>(item)));
    // The engine checks the values (negative ones included); here only that they fit.
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      throw InvalidArgument("splits must be 32-bit integers, got " + std::to_string(v));
    }
    out.push_back(static_cast<int32_t>(v));
  }
  return out;
}

// Operations whose handles hold nothing to read once they succeeded: they write into their
// input, or (barrier) have no data.
bool resultInTheBuffers(OpKind kind) {
  return kind == OpKind::Allreduce || kind == OpKind::Adasum || kind == OpKind::Broadcast ||
         kind == OpKind::Barrier;
}

// A copy of an imported host tensor for the engine to work on, for an out-of-place call: one
// allocation and one memcpy, where a framework's clone costs a dispatch or more.
OutputTensor copyOf(const TensorView& view) {
  if (!view.device.isCpu()) {
    throw InvalidArgument("copy=True takes host tensors, not " + view.device.name() + " ones");
  }
  OutputTensor copy = OutputTensor::allocate(view.dtype, view.shape);
  if (view.bytes() > 0) std::memcpy(copy.data(), view.data, view.bytes());
  return copy;
}

// Imports every tensor, enqueues them as one group and returns one Handle per name; a blocking
// call (`waits`) of an operation that writes into its buffers returns none, or with `copy` the
// results.
py::list enqueueTensors(EnqueueArgs args) {
  sweepDeferredReleases();
  auto rt = requireRuntime();
  const int kind = args.kind;
  if (kind < 0 || kind > static_cast<int>(OpKind::Reducescatter)) {
    throw InvalidArgument("unknown operation kind " + std::to_string(kind));
  }
  const auto opKind = static_cast<OpKind>(kind);
  const bool noTensor = opKind == OpKind::Join || opKind == OpKind::Barrier;
  const size_t n = noTensor ? 1 : args.tensors.size();
  if (noTensor && !args.tensors.empty()) {
    throw InvalidArgument(std::string(opKindName(opKind)) + " takes no tensors");
  }
  if (n == 0) throw InvalidArgument("enqueue needs at least one tensor");
  if (args.copy && (noTensor || !resultInTheBuffers(opKind))) {
    throw InvalidArgument(std::string("copy=True takes ALLREDUCE, ADASUM or BROADCAST, not ") +
                          opKindName(opKind));
  }
  if (args.copy && !args.waits) throw InvalidArgument("copy=True is for blocking calls (waits)");
  if (args.names.size() != n) {
    throw InvalidArgument("got " + std::to_string(args.names.size()) + " names for " +
                          std::to_string(n) + " requests");
  }
  const auto& overrides = args.dtypeOverrides;
  if (!overrides.empty() && !noTensor && overrides.size() != n) {
    throw InvalidArgument("dtype_overrides must have one entry per tensor");
  }

  OpRequest base;
  Request& q = base.request;
  q.kind = opKind;
  q.processSetId = args.processSetId;
  q.reduceOp = static_cast<ReduceOp>(args.reduceOp);
  q.prescale = args.prescale;
  q.postscale = args.postscale;
  q.rootRank = args.rootRank;
  q.splits = toSplits(args.splits);
  q.callSite = std::move(args.callSite);

  std::vector<std::unique_ptr<DlpackTensor>> inputs(n);
  std::vector<OutputTensor> copies(args.copy ? n : 0);
  std::vector<OpRequest> requests;
  requests.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    // The last request takes `base` itself (the only one for a single tensor): one copy fewer.
    requests.push_back(i + 1 < n ? base : std::move(base));
    requests[i].request.name = std::move(args.names[i]);
    if (noTensor) continue;  // empty view: no data, no shape
    inputs[i] = importTensor(args.tensors[i], overrides.empty() ? std::nullopt : overrides[i]);
    requests[i].tensor = inputs[i]->view();
    if (!args.copy) continue;
    // The caller's tensor is read once, here, and released: the engine has its copy.
    copies[i] = copyOf(requests[i].tensor);
    requests[i].tensor.data = copies[i].data();
    inputs[i].reset();
  }

  // On a throw here the imported inputs are released (GIL held) and nothing was queued.
  std::vector<std::shared_ptr<Handle>> handles = rt->enqueue(std::move(requests), args.waits);
  HORA_CHECK(handles.size() == n, "runtime returned " + std::to_string(handles.size()) +
                                      " handles for " + std::to_string(n) + " requests");
  std::vector<std::unique_ptr<PyHandle>> pyHandles(n);
  for (size_t i = 0; i < n; ++i) {
    pyHandles[i] = std::make_unique<PyHandle>(std::move(handles[i]), std::move(inputs[i]),
                                              args.copy ? copies[i].storage : nullptr);
  }
  if (args.waits) {
    // As hora.common.ops.wait_all: every operation finishes before the first error is raised,
    // so that none of the group's names stays in flight. An interrupted wait drops the handles,
    // which then keep their inputs until their operations finish.
    for (auto& h : pyHandles) h->finish(rt.get());
    sweepDeferredReleases();
    for (auto& h : pyHandles) h->raiseIfFailed();
    // The result is in the caller's buffers, or (copy) in the engine's copies: no Python
    // handle to build and drop per call.
    if (args.copy) {
      py::list results(n);
      for (size_t i = 0; i < n; ++i) results[i] = exportTensor(copies[i]);
      return results;
    }
    if (resultInTheBuffers(opKind)) return py::list();
  }
  py::list result(n);
  for (size_t i = 0; i < n; ++i) {
    PyList_SET_ITEM(
        result.ptr(), static_cast<py::ssize_t>(i),
        py::cast(pyHandles[i].release(), py::return_value_policy::take_ownership).release().ptr());
  }
  return result;
}

// The keywords of submit, in the order of its signature.
enum Arg {
  kKind,
  kTensors,
  kNames,
  kOp,
  kPrescale,
  kPostscale,
  kRoot,
  kSplits,
  kSetId,
  kFrames,
  kWaits,
  kCopy
};
constexpr int kNumArgs = 12;
constexpr int kNumPositional = 3;
constexpr const char* kArgNames[kNumArgs] = {"kind",           "tensors",     "names",     "op",
                                             "prescale",       "postscale",   "root_rank", "splits",
                                             "process_set_id", "hora_frames", "waits",     "copy"};

// The keywords' interned names, by Arg. Never released: they live as long as the module.
PyObject* const* internedArgNames() {
  static PyObject** names = [] {
    auto** out = new PyObject*[kNumArgs];
    for (int k = 0; k < kNumArgs; ++k) out[k] = PyUnicode_InternFromString(kArgNames[k]);
    return out;
  }();
  return names;
}

// `hint`: where to look first. Callers pass keywords in the signature's order, so the one after
// the previous keyword is almost always the match.
int argIndex(PyObject* keyword, int hint) {
  PyObject* const* names = internedArgNames();
  for (int i = 0; i < kNumArgs; ++i) {
    int k = (hint + i) % kNumArgs;
    if (keyword == names[k]) return k;
  }
  for (int i = 0; i < kNumArgs; ++i) {  // a keyword built at run time: not the interned one
    if (PyUnicode_Compare(keyword, names[i]) == 0) return i;
  }
  if (PyErr_Occurred()) throw py::error_already_set();
  throw py::type_error("submit() got an unexpected keyword argument '" +
                       py::str(keyword).cast<std::string>() + "'");
}

using ParsedArgs = std::array<PyObject*, kNumArgs>;

// The arguments by name, borrowed; null where not given.
ParsedArgs parseArgs(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  ParsedArgs out{};
  if (nargs > kNumPositional) {
    throw py::type_error(
        "submit() takes 3 positional arguments (kind, tensors, names); the "
        "others by keyword");
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) out[i] = args[i];
  const Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  int next = kNumPositional;
  for (Py_ssize_t i = 0; i < nkw; ++i) {
    int k = argIndex(PyTuple_GET_ITEM(kwnames, i), next);
    next = k + 1;
    if (out[k] != nullptr) {
      throw py::type_error(std::string("submit() got multiple values for argument '") +
                           kArgNames[k] + "'");
    }
    out[k] = args[nargs + i];
  }
  for (int k = 0; k < kNumPositional; ++k) {
    if (out[k] == nullptr) {
      throw py::type_error(std::string("submit() missing required argument '") + kArgNames[k] +
                           "'");
    }
  }
  return out;
}

bool boolArg(PyObject* value) {
  if (value == nullptr) return false;
  int v = PyObject_IsTrue(value);
  if (v < 0) throw py::error_already_set();
  return v == 1;
}

long intArg(PyObject* value, long fallback) {
  if (value == nullptr) return fallback;
  long v = PyLong_AsLong(value);
  if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

double floatArg(PyObject* value, double fallback) {
  if (value == nullptr) return fallback;
  double v = PyFloat_AsDouble(value);
  if (v == -1.0 && PyErr_Occurred()) throw py::error_already_set();
  return v;
}

PyObject* numpyArrayType() {
  // Never released: numpy stays imported as long as the module.
  static PyObject* type = py::object(py::module_::import("numpy").attr("ndarray")).release().ptr();
  return type;
}

// What DLPack imports for a NumPy array that NumPy will not export: ml_dtypes' bfloat16 and (on
// old NumPy) bool, as integers of their width and a dtype override. nullopt: the array as it is
// (the import then raises the reason, a read-only array's say).
std::optional<std::string> reinterpretForDlpack(py::object& array) {
  static PyObject* const kDtype = PyUnicode_InternFromString("dtype");
  py::object dtype = py::reinterpret_steal<py::object>(PyObject_GetAttr(array.ptr(), kDtype));
  if (!dtype) throw py::error_already_set();
  std::string kind = dtype.attr("kind").cast<std::string>();
  if (kind == "V" && dtype.attr("name").cast<std::string>() == kBfloat16) {
    array = array.attr("view")("uint16");
    return std::string(kBfloat16);
  }
  if (kind == "b") {
    array = array.attr("view")("uint8");
    return std::string("bool");
  }
  return std::nullopt;
}

// Adds `tensor`'s DLPack form to `args`; a NumPy array is exported here, which spares the
// import its generic probing of the object. Returns the dtype override (none for every common
// tensor).
std::optional<std::string> addTensor(PyObject* tensor, EnqueueArgs& args) {
  if (Py_TYPE(tensor) == reinterpret_cast<PyTypeObject*>(numpyArrayType())) {
    static PyObject* const kDlpack = PyUnicode_InternFromString("__dlpack__");
    PyObject* capsule = PyObject_CallMethodNoArgs(tensor, kDlpack);
    if (capsule != nullptr) {
      args.tensors.push_back(py::reinterpret_steal<py::object>(capsule));
      return std::nullopt;
    }
    PyErr_Clear();
    py::object array = py::reinterpret_borrow<py::object>(tensor);
    std::optional<std::string> override = reinterpretForDlpack(array);
    args.tensors.push_back(std::move(array));
    return override;
  }
  args.tensors.push_back(py::reinterpret_borrow<py::object>(tensor));
  return std::nullopt;
}

std::vector<std::string> namesOf(PyObject* names) {
  py::object seq = py::reinterpret_steal<py::object>(
      PySequence_Fast(names, "submit(): names must be a sequence of str"));
  if (!seq) throw py::error_already_set();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  PyObject** items = PySequence_Fast_ITEMS(seq.ptr());
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    Py_ssize_t size = 0;
    const char* text = PyUnicode_AsUTF8AndSize(items[i], &size);
    if (text == nullptr) throw py::error_already_set();
    out.emplace_back(text, static_cast<size_t>(size));
  }
  return out;
}

py::list submit(const ParsedArgs& a) {
  EnqueueArgs args;
  args.kind = static_cast<int>(intArg(a[kKind], 0));
  py::object tensors = py::reinterpret_steal<py::object>(
      PySequence_Fast(a[kTensors], "submit(): tensors must be a sequence"));
  if (!tensors) throw py::error_already_set();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(tensors.ptr());
  PyObject** items = PySequence_Fast_ITEMS(tensors.ptr());
  args.tensors.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    std::optional<std::string> override = addTensor(items[i], args);
    if (override && args.dtypeOverrides.empty()) args.dtypeOverrides.resize(n);
    if (override) args.dtypeOverrides[i] = std::move(override);
  }
  args.names = namesOf(a[kNames]);
  long op = intArg(a[kOp], static_cast<long>(ReduceOp::Sum));
  // A number no reduce op has reaches the engine's check as one (which names it).
  args.reduceOp = op < 0 || op > 0xff ? 0xff : static_cast<int>(op);
  args.prescale = floatArg(a[kPrescale], 1.0);
  args.postscale = floatArg(a[kPostscale], 1.0);
  args.rootRank = static_cast<int>(intArg(a[kRoot], 0));
  if (a[kSplits] != nullptr) args.splits = py::reinterpret_borrow<py::object>(a[kSplits]);
  args.processSetId = static_cast<int>(intArg(a[kSetId], 0));
  // The frames above submit's caller that are certainly Hora's: the call site search skips them.
  args.callSite = callSite(static_cast<int>(intArg(a[kFrames], 0)));
  args.waits = boolArg(a[kWaits]);
  args.copy = boolArg(a[kCopy]);
  std::vector<std::optional<std::string>> overrides = args.dtypeOverrides;
  // A blocking call on copies returns capsules, which carry their dtype.
  if (args.waits && args.copy) overrides.clear();

  py::list handles = enqueueTensors(std::move(args));
  for (size_t i = 0; i < overrides.size() && i < handles.size(); ++i) {
    if (overrides[i] && *overrides[i] == kBfloat16) handles[i].attr("_hora_dtype") = kBfloat16;
  }
  return handles;
}

PyObject* submitEntry(PyObject* /*self*/, PyObject* const* args, Py_ssize_t nargs,
                      PyObject* kwnames) {
  try {
    return submit(parseArgs(args, PyVectorcall_NARGS(nargs), kwnames)).release().ptr();
  } catch (...) {
    setPythonErrorFromCurrent();
    return nullptr;
  }
}

PyMethodDef submitDef = {
    "submit", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&submitEntry)),
    METH_FASTCALL | METH_KEYWORDS,
    "submit(kind, tensors, names, *, op=SUM, prescale=1.0, postscale=1.0, root_rank=0, "
    "splits=None, process_set_id=0, hora_frames=0, waits=False, copy=False) -> list of "
    "Handle\n\n"
    "The frontends' one submission: one group of `kind` (an OpKind) on `tensors` (DLPack "
    "capsules, NumPy arrays or objects with __dlpack__; none for JOIN and BARRIER), one name "
    "each. The engine checks the request (Horovod's errors), the call site is the first frame "
    "outside Hora above `hora_frames` frames over the caller's, and the group is enqueued. "
    "`waits`: a blocking call. submit returns once every operation of the group finished (the "
    "GIL released meanwhile, Ctrl-C let through), raising the first failure as "
    "hora.common.ops.engine_error presents it; a waiting thread that drives the engine finds "
    "the work still to do. A blocking allreduce, adasum, broadcast or barrier returns []: its "
    "result is in its buffers. `copy` (a blocking allreduce, adasum or broadcast of host "
    "tensors): the operation works on the engine's copy of each tensor and leaves the tensors "
    "as they are; it returns the results as DLPack capsules."};

// The engine's checks of the requests a traced call will make when it runs (hora.jax inside
// jit), on their shapes alone: the errors are raised where the call was written, at trace time.
void checkTraced(int kind, const std::vector<std::string>& names,
                 const std::vector<std::vector<int64_t>>& shapes, int op, int rootRank,
                 int processSetId) {
  auto rt = requireRuntime();
  const int rank = rt->topology().rank;
  ProcessSetTable sets(rank);
  if (processSetId >= 0) {
    std::vector<int> ids = rt->processSetIds();
    if (std::find(ids.begin(), ids.end(), processSetId) != ids.end()) {
      sets.add(processSetId, rt->processSetRanks(processSetId), nullptr);
    }
  }
  if (kind < 0 || kind > static_cast<int>(OpKind::Reducescatter)) {
    throw InvalidArgument("unknown operation kind " + std::to_string(kind));
  }
  if (names.size() != shapes.size()) {
    throw InvalidArgument("got " + std::to_string(names.size()) + " names for " +
                          std::to_string(shapes.size()) + " tensors");
  }
  static char placeholder = 0;  // the checks look at shapes, never at data
  for (size_t i = 0; i < names.size(); ++i) {
    OpRequest request;
    request.request.kind = static_cast<OpKind>(kind);
    request.request.name = names[i];
    request.request.processSetId = processSetId;
    request.request.reduceOp = static_cast<ReduceOp>(op < 0 || op > 0xff ? 0xff : op);
    request.request.rootRank = rootRank;
    request.tensor.data = &placeholder;
    request.tensor.shape = shapes[i];
    checkAndCompleteRequest(request, rank, sets, Capabilities::cpuComplete());
  }
}

}  // namespace

void registerSubmit(py::module_& m) {
  m.def("check_traced", &checkTraced, py::arg("kind"), py::arg("names"), py::arg("shapes"),
        py::arg("op"), py::arg("root_rank"), py::arg("process_set_id"),
        "The engine's checks of a traced call's requests, on their shapes alone, for a call "
        "traced now and run later (hora.jax inside jit); raises what submit would.");
  py::object name = m.attr("__name__");
  PyObject* fn = PyCFunction_NewEx(&submitDef, nullptr, name.ptr());
  if (fn == nullptr) throw py::error_already_set();
  m.attr("submit") = py::reinterpret_steal<py::object>(fn);
}

}  // namespace hora::bindings
