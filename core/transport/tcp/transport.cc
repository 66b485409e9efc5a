#include "core/transport/tcp/transport.h"

#include <numeric>

#include "core/common/errors.h"
#include "core/transport/tcp/communicator.h"
#include "core/transport/tcp/control_channel.h"
#include "core/transport/tcp/mesh.h"

namespace hora {
namespace tcp {

Connection TcpTransport::connect(const ConnectOptions& options, Store& store) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    throw InvalidArgument("tcp transport: rank " + std::to_string(options.rank) +
                          " is not within a job of size " + std::to_string(options.size));
  }
  if (options.opTimeout.count() <= 0 || options.startTimeout.count() <= 0) {
    throw InvalidArgument("tcp transport: timeouts must be positive");
  }
  MeshSockets mesh = connectMesh(options, store);
  auto peers = std::make_shared<TcpPeerSockets>();
  peers->worldRank = options.rank;
  peers->worldSize = options.size;
  peers->opTimeout = options.opTimeout;
  peers->spin = options.spin;
  peers->sockets = std::move(mesh.data);
  std::vector<int> world(options.size);
  std::iota(world.begin(), world.end(), 0);
  Connection c;
  c.world = std::make_unique<TcpCommunicator>(std::move(peers), std::move(world), options.rank);
  c.control = std::make_unique<TcpControlChannel>(options.rank, options.size,
                                                  std::move(mesh.control), options.opTimeout);
  return c;
}

}  // namespace tcp
}  // namespace hora
