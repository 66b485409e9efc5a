#include "core/transport/shm/transport.h"

#include <numeric>

#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/transport/shm/communicator.h"
#include "core/transport/shm/setup.h"
#include "core/transport/tcp/transport.h"

namespace hora {
namespace shm {
namespace {

std::unique_ptr<Communicator> worldOver(std::shared_ptr<ShmPeers> peers, int rank, int size) {
  std::vector<int> world(size);
  std::iota(world.begin(), world.end(), 0);
  return std::make_unique<ShmCommunicator>(std::move(peers), std::move(world), rank);
}

size_t ringBytesOf(const ConnectOptions& o) {
  return o.shmRingBytes > 0 ? o.shmRingBytes : kDefaultRingBytes;
}

}  // namespace

Connection ShmTransport::connect(const ConnectOptions& options, Store& store) {
  Connection c = tcp::TcpTransport().connect(options, store);
  Attachment a = attachJob(options, store, false, ringBytesOf(options));
  if (!a.peers) throw NotSupported("shm transport: cannot use shared memory: " + a.whyNot);
  c.world = worldOver(std::move(a.peers), options.rank, options.size);
  return c;
}

bool preferSharedMemory(Connection& connection, const ConnectOptions& options, Store& store,
                        bool disabled) {
  Attachment a = attachJob(options, store, disabled, ringBytesOf(options));
  if (!a.peers) {
    if (options.rank == 0) {
      HORA_LOG(Info, "collectives stay on " << connection.world->backendName()
                                            << ", not shared memory: " << a.whyNot);
    }
    return false;
  }
  connection.world = worldOver(std::move(a.peers), options.rank, options.size);
  if (options.rank == 0) {
    HORA_LOG(Debug, "collectives run over shared memory (" << options.size << " ranks)");
  }
  return true;
}

std::unique_ptr<Communicator> hostCommunicator(const ConnectOptions& options, Store& store,
                                               bool disabled, std::string* whyNot) {
  Attachment a = attachJob(options, store, disabled, ringBytesOf(options));
  if (!a.peers) {
    *whyNot = a.whyNot;
    return nullptr;
  }
  return worldOver(std::move(a.peers), options.rank, options.size);
}

}  // namespace shm
}  // namespace hora
