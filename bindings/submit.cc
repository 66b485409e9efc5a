// hora._core.submit: the last steps of every frontend call, in one crossing into C++. The
// frontends' pipeline (hora.common.ops) resolves names and the reduce op, then hands over here:
// Horovod's enqueue-time checks (with Horovod's messages), the tensors' DLPack export, the call
// site, and the enqueue itself. Done in Python, these steps cost more than the engine's own
// work on every call (each a few hundred nanoseconds of frames, attribute lookups and lists),
// and a backward pass makes hundreds of calls.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <string>
#include <vector>

#include "bindings/call_site.h"
#include "bindings/enqueue.h"
#include "bindings/py_handle.h"
#include "bindings/register.h"
#include "core/common/errors.h"
#include "core/messages/messages.h"

namespace py = pybind11;

namespace hora::bindings {
namespace {

constexpr const char* kBfloat16 = "bfloat16";

// What the Python pipeline lends this file (set once by hora.common.ops on import).
struct Helpers {
  py::object prepare;  // _prepare(tensor) -> (object for the engine, dtype override or None)
  py::dict exporters;  // type -> export(tensor) -> capsule or None (frontends' own exporters)
  py::object ndarray;  // numpy.ndarray
};

Helpers& helpers() {
  // Never destroyed: Python may be finalizing when static destructors run.
  static auto* h = new Helpers();
  return *h;
}

// The operation's name in messages: "allreduce" (the Python enum name, lowercase).
std::string what(int kind) {
  if (kind < 0 || kind > static_cast<int>(OpKind::Reducescatter)) return std::to_string(kind);
  std::string name = opKindName(static_cast<OpKind>(kind));
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return name;
}

bool isMember(const py::object& members, int rank) {
  int found = PySequence_Contains(members.ptr(), py::int_(rank).ptr());
  if (found < 0) throw py::error_already_set();
  return found == 1;
}

bool takesRows(OpKind kind) {
  return kind == OpKind::Allgather || kind == OpKind::Alltoall || kind == OpKind::Reducescatter;
}

// Horovod's checks at enqueue, in its order and with its messages (the engine checks again,
// with its own words, whatever reaches it). Returns the set's ranks.
py::object checkRegistered(int kind, const py::handle& processSet) {
  static PyObject* const kRanks = PyUnicode_InternFromString("ranks");
  static PyObject* const kId = PyUnicode_InternFromString("process_set_id");
  py::object members = processSet.attr(kRanks);
  if (processSet.attr(kId).is_none() || members.is_none()) {
    throw InvalidArgument(what(kind) + ": the process set " +
                          py::str(processSet).cast<std::string>() +
                          " is not registered; pass it to hora.init(process_sets=[...]) or "
                          "hora.add_process_set() first");
  }
  return members;
}

void checkRequest(int kind, int op, int rootRank, const py::object& members, int worldRank) {
  if (!isMember(members, worldRank)) {
    throw InvalidArgument(what(kind) + ": Rank " + std::to_string(worldRank) +
                          " is not a member of the provided process set.");
  }
  if (op < 0 || op > static_cast<int>(ReduceOp::Product)) {
    throw InvalidArgument(what(kind) + ": unknown reduce op " + std::to_string(op));
  }
  const auto opKind = static_cast<OpKind>(kind);
  const auto reduceOp = static_cast<ReduceOp>(op);
  if (opKind == OpKind::Reducescatter && reduceOp != ReduceOp::Sum &&
      reduceOp != ReduceOp::Average) {
    // Horovod raises HorovodInternalError (a RuntimeError) here; ValueError stays true too.
    throw InvalidCollectiveError("Reducescatter currently only supports AVERAGE and SUM.");
  }
  if (opKind == OpKind::Broadcast && !isMember(members, rootRank)) {
    throw InvalidArgument("broadcast received invalid root rank " + std::to_string(rootRank) +
                          " for provided process set");
  }
}

void checkDimensions(int kind, size_t ndim) {
  if (takesRows(static_cast<OpKind>(kind)) && ndim == 0) {
    throw InvalidArgument(what(kind) +
                          " needs a tensor of at least one dimension; reshape the scalar to [1]");
  }
}

// The object the engine imports and its dtype override. A frontend's own exporter or a NumPy
// array's __dlpack__ here; anything else (and any array NumPy will not export: bfloat16, bool
// on old NumPy) through the Python pipeline's _prepare, which knows every case and its errors.
// Returns the dtype override (none for every common tensor).
std::optional<std::string> prepare(const py::handle& tensor, EnqueueArgs& args) {
  Helpers& h = helpers();
  auto* type = reinterpret_cast<PyObject*>(Py_TYPE(tensor.ptr()));
  PyObject* exporter = PyDict_GetItem(h.exporters.ptr(), type);  // borrowed
  if (exporter != nullptr) {
    py::object capsule = py::reinterpret_borrow<py::object>(exporter)(tensor);
    if (!capsule.is_none()) {
      args.tensors.push_back(std::move(capsule));
      return std::nullopt;
    }
  }
  if (type == h.ndarray.ptr()) {
    static PyObject* const kDlpack = PyUnicode_InternFromString("__dlpack__");
    PyObject* capsule = PyObject_CallMethodNoArgs(tensor.ptr(), kDlpack);
    if (capsule != nullptr) {
      args.tensors.push_back(py::reinterpret_steal<py::object>(capsule));
      return std::nullopt;
    }
    PyErr_Clear();  // _prepare takes the array the way that works, or raises the error
  }
  py::tuple prepared = h.prepare(tensor);
  args.tensors.push_back(prepared[0]);
  py::object override = prepared[1];
  if (override.is_none()) return std::nullopt;
  return override.cast<std::string>();
}

py::list submit(int kind, const py::list& tensors, const py::list& names, int op, double prescale,
                double postscale, int rootRank, const py::object& splits,
                const py::object& processSet, int processSetId, int skip) {
  Helpers& h = helpers();
  if (!h.prepare) throw InternalError("hora._core.submit: hora.common.ops set no helpers");
  py::object members = checkRegistered(kind, processSet);
  auto rt = requireRuntime();
  checkRequest(kind, op, rootRank, members, rt->topology().rank);
  if (takesRows(static_cast<OpKind>(kind))) {
    for (py::handle tensor : tensors) {
      py::object shape = py::getattr(tensor, "shape", py::none());
      if (!shape.is_none()) checkDimensions(kind, py::len(shape));
    }
  }

  EnqueueArgs args;
  args.kind = kind;
  args.tensors.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::optional<std::string> override = prepare(tensors[i], args);
    if (override && args.dtypeOverrides.empty()) args.dtypeOverrides.resize(tensors.size());
    if (override) args.dtypeOverrides[i] = std::move(override);
  }
  args.names.reserve(names.size());
  for (py::handle name : names) args.names.push_back(name.cast<std::string>());
  args.processSetId = processSetId;
  args.reduceOp = op;
  args.prescale = prescale;
  args.postscale = postscale;
  args.rootRank = rootRank;
  args.splits = splits;
  args.callSite = callSite(skip);
  std::vector<std::optional<std::string>> overrides = args.dtypeOverrides;

  py::list handles = enqueueTensors(std::move(args));
  for (size_t i = 0; i < overrides.size(); ++i) {
    if (overrides[i] && *overrides[i] == kBfloat16) handles[i].attr("_hora_dtype") = kBfloat16;
  }
  return handles;
}

}  // namespace

void registerSubmit(py::module_& m) {
  m.def(
      "set_submit_helpers",
      [](py::object prepare, py::dict exporters, py::object ndarray) {
        Helpers& h = helpers();
        h.prepare = std::move(prepare);
        h.exporters = std::move(exporters);
        h.ndarray = std::move(ndarray);
      },
      py::arg("prepare"), py::arg("exporters"), py::arg("ndarray"),
      "What submit borrows from hora.common.ops: its _prepare, its exporter table (read on "
      "every call, so later registrations count) and numpy.ndarray.");
  m.def(
      "check_submission",
      [](int kind, const std::vector<size_t>& ndims, int op, int rootRank,
         const py::object& processSet) {
        py::object members = checkRegistered(kind, processSet);
        checkRequest(kind, op, rootRank, members, requireRuntime()->topology().rank);
        for (size_t ndim : ndims) checkDimensions(kind, ndim);
      },
      py::arg("kind"), py::arg("ndims"), py::arg("op"), py::arg("root_rank"),
      py::arg("process_set"),
      "submit's checks alone, for a call traced now and run later (hora.jax inside jit): the "
      "set is registered and has this rank, the op and root fit, no scalar where rows are "
      "needed.");
  m.def("submit", &submit, py::arg("kind"), py::arg("tensors"), py::arg("names"), py::arg("op"),
        py::arg("prescale"), py::arg("postscale"), py::arg("root_rank"), py::arg("splits"),
        py::arg("process_set"), py::arg("process_set_id"), py::arg("skip"),
        "The frontends' submission: Horovod's checks, DLPack export, call site (the first "
        "frame above `skip` frames over the caller's outside Hora), enqueue; one Handle per "
        "name.");
}

}  // namespace hora::bindings
