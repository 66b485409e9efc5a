#include "core/transport/shm/transport.h"

#include <numeric>

#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/transport/shm/agreement_board.h"
#include "core/transport/shm/communicator.h"
#include "core/transport/shm/control_channel.h"
#include "core/transport/shm/setup.h"
#include "core/transport/transport.h"

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

// The arena is read only by window allreduces: without a window it would go unused.
size_t arenaBytesOf(const ConnectOptions& o) { return o.shmWindowBytes > 0 ? o.shmArenaBytes : 0; }

// Moves negotiation onto the segment when it runs on this job's TCP control connections (another
// controller, such as MPI, stays) and every rank allows it. The TCP connections close: nothing
// would read them any more, and a local peer's exit is seen through the segment (pidfd, gone flag).
// The agreement board comes with it. Returns true when it moved.
bool moveControl(Connection& c, const Attachment& a, const ConnectOptions& o) {
  if (!a.control || c.control->backendName() != "tcp") return false;
  c.control = std::make_unique<ShmControlChannel>(a.peers, o.opTimeout);
  c.board = std::make_unique<ShmAgreementBoard>(a.peers);
  return true;
}

}  // namespace

Connection ShmTransport::connect(const ConnectOptions& options, Store& store) {
  Connection c = makeTransport("tcp")->connect(options, store);
  Attachment a = attachJob(options, store, false, ringBytesOf(options), options.shmWindowBytes,
                           arenaBytesOf(options));
  if (!a.peers) throw NotSupported("shm transport: cannot use shared memory: " + a.whyNot);
  moveControl(c, a, options);
  c.world = worldOver(std::move(a.peers), options.rank, options.size);
  return c;
}

bool preferSharedMemory(Connection& connection, const ConnectOptions& options, Store& store,
                        bool disabled) {
  Attachment a = attachJob(options, store, disabled, ringBytesOf(options), options.shmWindowBytes,
                           arenaBytesOf(options));
  if (!a.peers) {
    if (options.rank == 0) {
      HORA_LOG(Info, "collectives stay on " << connection.world->backendName()
                                            << ", not shared memory: " << a.whyNot);
    }
    return false;
  }
  const bool control = moveControl(connection, a, options);
  connection.world = worldOver(std::move(a.peers), options.rank, options.size);
  if (options.rank == 0) {
    HORA_LOG(Debug, "collectives run over shared memory (" << options.size
                                                           << " ranks), negotiation "
                                                           << (control ? "too" : "over TCP"));
  }
  return true;
}

std::unique_ptr<Communicator> hostCommunicator(const ConnectOptions& options, Store& store,
                                               bool disabled, const std::vector<int>& jobRanks,
                                               std::string* whyNot) {
  // No window: the hierarchical steps inside a host run over the rings.
  Attachment a = attachJob(options, store, disabled, ringBytesOf(options));
  if (!a.peers) {
    *whyNot = a.whyNot;
    return nullptr;
  }
  a.peers->jobRanks = jobRanks;
  return worldOver(std::move(a.peers), options.rank, options.size);
}

}  // namespace shm
}  // namespace hora
