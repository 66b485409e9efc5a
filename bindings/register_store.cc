// hora._core.StoreServer: the rendezvous store a launcher (horarun) serves for its ranks.
// hora._core.StoreClient: a client of such a store (the elastic driver and its workers talk
// through one). Every blocking call releases the GIL and takes a timeout.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings/register.h"
#include "core/common/errors.h"
#include "core/store/tcp_store.h"

namespace py = pybind11;

namespace hora::bindings {
namespace {

class PyStoreServer {
 public:
  PyStoreServer(const std::string& host, int port, const std::string& secret) {
    py::gil_scoped_release release;
    server_ = std::make_unique<TcpStoreServer>(host, port, secret);
  }

  int port() const {
    if (!server_) throw InvalidArgument("the store server was stopped");
    return server_->port();
  }

  void stop() {
    py::gil_scoped_release release;
    if (server_) server_->stop();
    server_.reset();
  }

 private:
  std::unique_ptr<TcpStoreServer> server_;
};

Millis toMillis(double seconds) {
  if (!(seconds >= 0)) throw InvalidArgument("a store timeout must be >= 0 seconds");
  return Millis(static_cast<int64_t>(seconds * 1000.0));
}

class PyStoreClient {
 public:
  PyStoreClient(const std::string& host, int port, const std::string& secret,
                double connectTimeoutSeconds) {
    Millis timeout = toMillis(connectTimeoutSeconds);
    py::gil_scoped_release release;
    client_ = std::make_unique<TcpStoreClient>(host, port, secret, timeout);
  }

  void set(const std::string& key, const py::bytes& value) {
    std::string data = value;
    py::gil_scoped_release release;
    client_->set(key, data);
  }

  py::bytes get(const std::string& key, double timeoutSeconds) {
    Millis timeout = toMillis(timeoutSeconds);
    std::string value;
    {
      py::gil_scoped_release release;
      value = client_->get(key, timeout);
    }
    return py::bytes(value);
  }

  // The value when the key exists now, else None (never blocks on a missing key).
  std::optional<py::bytes> tryGet(const std::string& key) {
    std::optional<std::string> value;
    {
      py::gil_scoped_release release;
      if (client_->check({key})) value = client_->get(key, Millis(0));
    }
    if (!value) return std::nullopt;
    return py::bytes(*value);
  }

  int64_t add(const std::string& key, int64_t delta) {
    py::gil_scoped_release release;
    return client_->add(key, delta);
  }

  bool check(const std::vector<std::string>& keys) {
    py::gil_scoped_release release;
    return client_->check(keys);
  }

  void wait(const std::vector<std::string>& keys, double timeoutSeconds) {
    Millis timeout = toMillis(timeoutSeconds);
    py::gil_scoped_release release;
    client_->wait(keys, timeout);
  }

 private:
  std::unique_ptr<TcpStoreClient> client_;
};

}  // namespace

void registerStore(py::module_& m) {
  py::class_<PyStoreServer>(m, "StoreServer",
                            "Rendezvous key-value store served on a TCP port until stop().")
      .def(py::init<const std::string&, int, const std::string&>(), py::arg("host") = "0.0.0.0",
           py::arg("port") = 0, py::arg("secret") = "",
           "Start serving on host:port (port 0 picks a free port).")
      .def_property_readonly("port", &PyStoreServer::port, "The port actually bound.")
      .def("stop", &PyStoreServer::stop, "Stop serving; idempotent.");
  py::class_<PyStoreClient>(m, "StoreClient",
                            "Client of a StoreServer; each blocking call takes a timeout (s).")
      .def(py::init<const std::string&, int, const std::string&, double>(), py::arg("host"),
           py::arg("port"), py::arg("secret"), py::arg("connect_timeout") = 30.0,
           "Connect and authenticate within connect_timeout seconds (IoError otherwise).")
      .def("set", &PyStoreClient::set, py::arg("key"), py::arg("value"), "Set key to value.")
      .def("get", &PyStoreClient::get, py::arg("key"), py::arg("timeout"),
           "The value of key, waiting up to timeout seconds for it (HoraTimeoutError).")
      .def("try_get", &PyStoreClient::tryGet, py::arg("key"),
           "The value of key, or None when it does not exist now.")
      .def("add", &PyStoreClient::add, py::arg("key"), py::arg("delta"),
           "Atomically add delta to the integer at key (missing = 0); the new value.")
      .def("check", &PyStoreClient::check, py::arg("keys"), "True when every key exists.")
      .def("wait", &PyStoreClient::wait, py::arg("keys"), py::arg("timeout"),
           "Wait up to timeout seconds until every key exists (HoraTimeoutError).");
}

}  // namespace hora::bindings
