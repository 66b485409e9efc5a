#pragma once
// TcpTransport: the built-in transport ("tcp", alias "gloo"), needing nothing but TCP sockets.
// connect() builds the mesh (mesh.h) and returns the world TcpCommunicator and the
// TcpControlChannel over it. Stateless: one instance may connect any number of times.
#include <string>

#include "core/transport/transport.h"

namespace hora {
namespace tcp {

class TcpTransport : public Transport {
 public:
  std::string name() const override { return "tcp"; }
  Connection connect(const ConnectOptions& options, Store& store) override;
};

}  // namespace tcp
}  // namespace hora
