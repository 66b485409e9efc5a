#pragma once
// Setting up the shared segment of a job whose ranks all run on one host (collective, over the
// rendezvous store, bounded by options.startTimeout):
//   1. every rank publishes its host identity (boot id, host name, network namespace) or that
//      HORA_SHM_DISABLE is set; all ranks read all of them and reach the same verdict;
//   2. rank 0 creates the segment (segment.h) and listens on an abstract Unix socket with a
//      random name (nothing on disk, gone when closed); the other ranks connect, prove the job
//      secret with the usual handshake (core/net/handshake.h), and receive the segment's file
//      descriptor over SCM_RIGHTS. A connection that fails the handshake gets nothing;
//   3. every rank maps the segment, records its pid there, closes the descriptor and publishes
//      "ok" (saying whether its HORA_SHM_CONTROL allows negotiation over shared memory) or why it
//      failed; all ranks wait for all of them.
// The result is the same on every rank: a segment, or the one reason why not (then the caller
// keeps its TCP or MPI communicator).
#include <memory>
#include <string>

#include "core/store/store.h"
#include "core/transport/shm/links.h"
#include "core/transport/transport.h"

namespace hora {
namespace shm {

struct Attachment {
  std::shared_ptr<ShmPeers> peers;  // null when shared memory is not used
  std::string whyNot;               // the reason, identical on every rank
  bool control = false;             // every rank allows negotiation over shared memory
};

// disabled: this rank's HORA_SHM_DISABLE. ringBytes: bytes of each rank-pair ring; windowBytes:
// of each rank's window (0: none); arenaBytes: of each rank's arena area (0: none).
Attachment attachJob(const ConnectOptions& options, Store& store, bool disabled, size_t ringBytes,
                     size_t windowBytes = 0, size_t arenaBytes = 0);

}  // namespace shm
}  // namespace hora
