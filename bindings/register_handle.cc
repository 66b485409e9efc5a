#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <string>
#include <utility>

#include "bindings/device_tensor.h"
#include "bindings/py_handle.h"
#include "bindings/register.h"
#include "core/common/errors.h"

namespace py = pybind11;

namespace hora::bindings {
namespace {

// What a dropped handle leaves behind until its operation finishes: the buffers the engine
// still reads or writes.
struct Deferred {
  std::shared_ptr<Handle> handle;
  std::unique_ptr<DlpackTensor> input;
  std::shared_ptr<uint8_t> copy;
};

// Guarded by the GIL. Never destroyed: at interpreter exit the deleters could not run safely.
std::vector<Deferred>& deferredReleases() {
  static auto* list = new std::vector<Deferred>();
  return *list;
}

// Blocking waits wake up this often to let Ctrl-C (KeyboardInterrupt) through.
constexpr auto kSignalCheckInterval = std::chrono::milliseconds(200);

py::dtype numpyDtype(DataType t) {
  // NumPy has no bfloat16: those results travel as uint16 and the hora package views them
  // back. Made once per dtype; never released, as the module's other NumPy objects.
  static auto* cache = new std::vector<py::object>(kNumDataTypes);
  py::object& d = (*cache)[static_cast<size_t>(t)];
  if (!d) {
    d = py::module_::import("numpy").attr("dtype")(t == DataType::BFloat16 ? "uint16"
                                                                           : dtypeName(t));
  }
  return py::reinterpret_borrow<py::dtype>(d);
}

}  // namespace

void sweepDeferredReleases() {
  auto& list = deferredReleases();
  auto finished = std::stable_partition(list.begin(), list.end(),
                                        [](const Deferred& d) { return !d.handle->poll(); });
  std::vector<Deferred> release(std::make_move_iterator(finished),
                                std::make_move_iterator(list.end()));
  list.erase(finished, list.end());
  // `release` dies last: a deleter may run Python code that drops another handle (and sweeps
  // again), so the list must already be consistent.
}

PyHandle::~PyHandle() {
  if ((input_ || copy_) && handle_ && !handle_->poll()) {
    deferredReleases().push_back(Deferred{handle_, std::move(input_), std::move(copy_)});
  }
}

void PyHandle::releaseInputIfDone() {
  if (input_ && handle_->poll()) input_.reset();
}

bool PyHandle::poll() {
  bool done = handle_->poll();
  if (done) releaseInputIfDone();
  return done;
}

bool waitInterruptibly(const Handle& handle, std::optional<double> timeoutSeconds,
                       Runtime* runtime) {
  // A finished operation (most of a step's waits) needs no blocked state, whose start and end
  // would each wake the background loop, and no release of the GIL.
  if (handle.poll()) return true;
  Clock::time_point deadline;  // read the clock only for a timeout: blocking calls pass none
  if (timeoutSeconds) {
    deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(std::max(0.0, *timeoutSeconds)));
  }
  std::shared_ptr<Runtime> looked;  // keeps a runtime looked up here alive for the wait
  if (!timeoutSeconds && runtime == nullptr) {
    looked = currentRuntime();
    runtime = looked.get();
  }
  BlockedScope blocked(timeoutSeconds ? nullptr : runtime, handle.driven());
  while (true) {
    Millis slice = kSignalCheckInterval;
    if (timeoutSeconds) {
      auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
      slice = std::max(Millis(0), std::min(slice, left));
    }
    bool done = false;
    {
      py::gil_scoped_release release;
      done = handle.wait(slice);
    }
    if (done) return true;
    if (timeoutSeconds && Clock::now() >= deadline) return false;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

bool PyHandle::wait(std::optional<double> timeoutSeconds) {
  bool done = waitInterruptibly(*handle_, timeoutSeconds);
  sweepDeferredReleases();
  if (!done) return false;
  releaseInputIfDone();
  handle_->rethrowIfFailed();
  return true;
}

void PyHandle::finish(Runtime* runtime) {
  waitInterruptibly(*handle_, std::nullopt, runtime);
  releaseInputIfDone();
}

void PyHandle::requireSuccess(const char* what) {
  if (!handle_->poll()) {
    throw InvalidArgument(std::string(what) +
                          "() called before the operation finished; call wait() first");
  }
  handle_->rethrowIfFailed();
}

py::object PyHandle::output() {
  requireSuccess("output");
  const OutputTensor& out = handle_->output;
  if (!out.storage) return py::none();
  if (!out.device.isCpu()) return wrapDeviceOutput(out);
  // The array's base owns a reference to the engine buffer: zero-copy, freed with the last view.
  auto* keepAlive = new std::shared_ptr<uint8_t>(out.storage);
  py::capsule base(keepAlive, [](void* p) { delete static_cast<std::shared_ptr<uint8_t>*>(p); });
  std::vector<py::ssize_t> shape(out.shape.begin(), out.shape.end());
  return py::array(numpyDtype(out.dtype), shape, out.data(), base);
}

std::vector<int32_t> PyHandle::receivedSplits() {
  requireSuccess("received_splits");
  return handle_->receivedSplits;
}

int PyHandle::lastJoinedRank() {
  requireSuccess("last_joined_rank");
  return handle_->lastJoinedRank;
}

void registerHandle(py::module_& m) {
  // dynamic_attr: frontends attach what they need to finish the result (e.g. the input dtype).
  py::class_<PyHandle>(m, "Handle", py::dynamic_attr(),
                       "Completion of one enqueued operation; keeps its input alive until done.")
      .def("poll", &PyHandle::poll, "True when the operation has finished (with or without error).")
      .def("wait", &PyHandle::wait, py::arg("timeout") = py::none(),
           "Block (GIL released) until done or `timeout` seconds passed. Returns False on "
           "timeout; raises the operation's error when it failed.")
      .def("output", &PyHandle::output,
           "Engine-owned result array (allgather, alltoall, reducescatter), zero-copy; None for "
           "in-place operations. bfloat16 results come as uint16.")
      .def("received_splits", &PyHandle::receivedSplits,
           "Alltoall: number of rows received from each rank of the process set.")
      .def("last_joined_rank", &PyHandle::lastJoinedRank, "Join: the last rank that joined.")
      .def("__repr__", [](PyHandle& h) {
        return std::string("<hora._core.Handle ") + (h.poll() ? "done" : "pending") + ">";
      });
}

}  // namespace hora::bindings
