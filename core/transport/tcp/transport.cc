#include "core/transport/tcp/transport.h"

#include <algorithm>
#include <numeric>

#include "core/common/errors.h"
#include "core/common/settings.h"
#include "core/transport/tcp/communicator.h"
#include "core/transport/tcp/control_channel.h"
#include "core/transport/tcp/mesh.h"

namespace hora {
namespace tcp {
namespace {

// Keepalive on the data sockets: a cut link or a dead host fails the collectives waiting on it
// within kUnreachableAfter (control_channel.h; the op timeout when shorter) instead of at the op
// timeout. Probes start after 3 s of silence, one a second, and five unanswered ones fail it.
constexpr Millis kProbeInterval{1000};  // LinkOpener's dials use the same keepalive
constexpr int kProbes = 5;

}  // namespace

Connection TcpTransport::connect(const ConnectOptions& options, Store& store) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    throw InvalidArgument("tcp transport: rank " + std::to_string(options.rank) +
                          " is not within a job of size " + std::to_string(options.size));
  }
  if (options.opTimeout.count() <= 0 || options.startTimeout.count() <= 0) {
    throw InvalidArgument("tcp transport: timeouts must be positive");
  }
  // Checked before the mesh is built, which sizes its tables by size and indexes them by rank.
  MeshSockets mesh = connectMesh(options, store, envBool("TCP_EAGER_MESH"));
  auto peers = std::make_shared<TcpPeerSockets>();
  peers->worldRank = options.rank;
  peers->worldSize = options.size;
  peers->opTimeout = options.opTimeout;
  peers->spin = options.spin;
  peers->unreachableAfter = std::min(options.opTimeout, kUnreachableAfter);
  // Idle time plus five probes make up unreachableAfter; below six seconds the idle time stays at
  // one probe interval, and keepalive then takes longer than unreachableAfter.
  peers->keepaliveIdle =
      std::max(kProbeInterval, peers->unreachableAfter - kProbes * kProbeInterval);
  peers->sockets.resize(options.size);
  peers->addresses.resize(options.size);
  std::vector<bool> linked(options.size, false);
  for (int r = 0; r < options.size; ++r) {
    // The published host until a link gives the address the peer is actually reached at.
    if (!mesh.addresses[r].empty()) {
      int port = 0;
      net::parseHostPort(mesh.addresses[r], &peers->addresses[r], &port);
    }
    if (!mesh.data[r].valid()) continue;
    linked[r] = true;
    peers->adopt(r, std::move(mesh.data[r]));
  }
  if (options.size > 1) {
    TcpPeerSockets* p = peers.get();
    peers->opener = std::make_unique<LinkOpener>(
        options.rank, options.secret, std::move(mesh.listener), std::move(mesh.addresses), linked,
        peers->unreachableAfter, [p](int rank, net::Socket s) { p->adopt(rank, std::move(s)); },
        [p](int rank, const char* doing, const char* op) {
          return p->unreachableText(rank, doing, op);
        });
  }
  // Every rank's host, for the control channel to name the ranks of a host that goes silent.
  std::vector<std::string> hosts = peers->addresses;
  std::vector<int> world(options.size);
  // The world communicator maps its ranks onto world ranks one to one; subsets reuse the same
  // sockets through another mapping.
  std::iota(world.begin(), world.end(), 0);
  Connection c;
  c.world = std::make_unique<TcpCommunicator>(std::move(peers), std::move(world), options.rank);
  c.control = std::make_unique<TcpControlChannel>(options.rank, options.size,
                                                  std::move(mesh.control), options.opTimeout,
                                                  options.controlFanout, std::move(hosts));
  return c;
}

}  // namespace tcp
}  // namespace hora
