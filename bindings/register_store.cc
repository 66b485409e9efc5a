// hora._core.StoreServer: the rendezvous store a launcher (horarun) serves for its ranks.
#include <pybind11/pybind11.h>

#include <memory>
#include <string>

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

}  // namespace

void registerStore(py::module_& m) {
  py::class_<PyStoreServer>(m, "StoreServer",
                            "Rendezvous key-value store served on a TCP port until stop().")
      .def(py::init<const std::string&, int, const std::string&>(), py::arg("host") = "0.0.0.0",
           py::arg("port") = 0, py::arg("secret") = "",
           "Start serving on host:port (port 0 picks a free port).")
      .def_property_readonly("port", &PyStoreServer::port, "The port actually bound.")
      .def("stop", &PyStoreServer::stop, "Stop serving; idempotent.");
}

}  // namespace hora::bindings
