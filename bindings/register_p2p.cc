// hora._core.PointToPoint: tagged point-to-point messages between ranks (core/p2p/channel.h), for
// the torch.distributed backend's send/recv. Buffers come through the buffer protocol (a NumPy
// array, memoryview, bytearray, a CPU tensor's NumPy view) and travel as raw bytes: the caller
// handles dtypes. send and recv release the GIL for the whole wait, so many Python threads may
// use one channel at once; errors map through the one translator (errors.cc).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "bindings/register.h"
#include "core/common/errors.h"
#include "core/p2p/channel.h"

namespace py = pybind11;

namespace hora::bindings {
namespace {

// A C-contiguous view of a Python buffer, held (and the exporter's memory pinned) while it lives.
class BufferView {
 public:
  BufferView(const py::object& obj, bool writable, const char* doing) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) == 0) {
      held_ = true;
      return;
    }
    PyErr_Clear();
    if (!PyObject_CheckBuffer(obj.ptr())) {
      throw py::type_error(std::string(doing) +
                           " needs an object with the buffer protocol (a NumPy array, "
                           "memoryview or bytearray), not " +
                           std::string(py::str(py::type::of(obj).attr("__name__"))));
    }
    // Tell a read-only buffer apart from a non-contiguous one.
    Py_buffer probe;
    if (writable && PyObject_GetBuffer(obj.ptr(), &probe, PyBUF_C_CONTIGUOUS) == 0) {
      PyBuffer_Release(&probe);
      throw InvalidArgument(std::string(doing) +
                            " needs a writable buffer to receive into; this one is read-only "
                            "(pass a NumPy array, bytearray or writable memoryview)");
    }
    PyErr_Clear();
    throw InvalidArgument(std::string(doing) +
                          " needs a C-contiguous buffer (use numpy.ascontiguousarray or "
                          "tensor.contiguous() first)");
  }
  ~BufferView() {
    if (held_) PyBuffer_Release(&view_);
  }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;

  void* data() const { return view_.buf; }
  size_t bytes() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

// Seconds to the engine's timeout; infinity waits without limit.
Millis toTimeout(double seconds, const char* doing) {
  if (std::isnan(seconds) || seconds < 0) {
    throw InvalidArgument(std::string(doing) + ": the timeout must be >= 0 seconds (or inf)");
  }
  if (seconds >= 1e12) return p2p::kNoTimeout;
  return Millis(static_cast<int64_t>(std::ceil(seconds * 1000.0)));
}

class PyPointToPoint {
 public:
  PyPointToPoint(int rank, int size, const std::string& secret, const std::string& listenHost) {
    py::gil_scoped_release release;
    channel_ = std::make_unique<p2p::Channel>(rank, size, secret, listenHost);
  }

  ~PyPointToPoint() {
    if (!channel_) return;
    py::gil_scoped_release release;
    channel_.reset();
  }

  std::string address() const { return channel_->address(); }

  void setPeers(const std::vector<std::string>& addresses) {
    py::gil_scoped_release release;
    channel_->setPeers(addresses);
  }

  void send(const py::object& buffer, int dst, int64_t tag, double timeout) {
    Millis t = toTimeout(timeout, "send");
    BufferView view(buffer, false, "send");
    py::gil_scoped_release release;
    channel_->send(view.data(), view.bytes(), dst, tag, t);
  }

  int recv(const py::object& buffer, int src, int64_t tag, double timeout) {
    Millis t = toTimeout(timeout, "recv");
    BufferView view(buffer, true, "recv");
    py::gil_scoped_release release;
    return channel_->recv(view.data(), view.bytes(), src, tag, t);
  }

  void close() {
    py::gil_scoped_release release;
    channel_->close();
  }

 private:
  std::unique_ptr<p2p::Channel> channel_;
};

}  // namespace

void registerP2p(py::module_& m) {
  py::class_<PyPointToPoint>(
      m, "PointToPoint",
      "Tagged point-to-point messages between the ranks of a job over TCP, independent of the "
      "collective engine. Messages from one rank with one tag arrive in the order they were "
      "sent. Buffers travel as raw bytes; every call that waits releases the GIL.")
      .def(py::init<int, int, const std::string&, const std::string&>(), py::arg("rank"),
           py::arg("size"), py::arg("secret"), py::arg("listen_host"),
           "Listen on a free port of listen_host (\"\" = every interface, \"127.0.0.1\" for a "
           "job on one host) and start the I/O thread.")
      .def("address", &PyPointToPoint::address,
           "The \"host:port\" the other ranks connect to; give it to them (e.g. via the store).")
      .def("set_peers", &PyPointToPoint::setPeers, py::arg("addresses"),
           "Every rank's address(), index = rank; once, before the first send.")
      .def("send", &PyPointToPoint::send, py::arg("buffer"), py::arg("dst"), py::arg("tag"),
           py::arg("timeout"),
           "Send the bytes of buffer to rank dst with tag; returns once they are handed to the "
           "kernel. HoraTimeoutError after timeout seconds, TransportError when dst's connection "
           "failed, ShutdownError after close().")
      .def("recv", &PyPointToPoint::recv, py::arg("buffer"), py::arg("src"), py::arg("tag"),
           py::arg("timeout"),
           "Receive one message with tag from rank src (-1: any rank) into the writable buffer, "
           "whose size must be the message's; returns the sender's rank. ValueError on a size "
           "mismatch (the message is consumed), HoraTimeoutError after timeout seconds, "
           "TransportError when src closed its connection, ShutdownError after close().")
      .def("close", &PyPointToPoint::close,
           "Close the channel: pending and later sends and receives raise ShutdownError. "
           "Idempotent.");
}

}  // namespace hora::bindings
