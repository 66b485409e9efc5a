#pragma once
// Transport: a factory, registered by name ("tcp", "shm", "mpi", "nccl"), that connects this
// process to the other ranks of the job and returns the world Communicator and the ControlChannel.
//
// Contract: connect() is collective over all ranks; it blocks until every rank has connected or
// options.startTimeout passes (TimeoutError naming the ranks that never arrived).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/common/time.h"
#include "core/store/store.h"
#include "core/transport/agreement_board.h"
#include "core/transport/communicator.h"
#include "core/transport/control_channel.h"

namespace hora {

// ConnectOptions::mpiComm when no communicator is given: MPI_COMM_WORLD. Every other value is a
// Fortran handle (MPI_Comm_c2f), negative ones included: MPICH's handles of the communicators it
// makes have the sign bit set (0x84000002), Open MPI's are small indices.
constexpr int64_t kNoMpiComm = -1;

struct ConnectOptions {
  int rank = 0;
  int size = 1;
  std::string secret;          // every connection proves knowledge of it (HMAC of a nonce)
  std::string listenHost;      // address to listen on and advertise; "" = this host's default
  Millis startTimeout{30000};  // rendezvous and connection set-up
  Millis opTimeout{60000};     // a peer silent this long inside a collective fails it
  Micros spin{0};              // waits for data poll this long before sleeping (spin.h)
  size_t shmRingBytes = 0;     // shm: bytes of each rank-pair ring; 0 = the default
  size_t shmWindowBytes = 0;   // shm: bytes of each rank's window; 0 = none
  size_t shmArenaBytes = 0;    // shm: bytes of each rank's arena area (with a window); 0 = none
  std::string shmHostName;     // shm: added to the host identity when set (a testing aid:
                               //      HORA_SHM_HOST_BY_NAME, see setup.h)
  bool shmControl = true;      // shm: negotiation over shared memory too (HORA_SHM_CONTROL)
  int controlFanout = 32;      // tcp: children per rank of the control tree (HORA_CONTROL_FANOUT)
  int64_t mpiComm = -1;        // mpi: Fortran handle (MPI_Comm_c2f) of the communicator to
                               //      run on; kNoMpiComm = MPI_COMM_WORLD. Others ignore it.
  // Who serves the rendezvous store: a rank whose store fails names it (rendezvous_store.h).
  StoreOwner storeOwner = StoreOwner::Launcher;
};

struct Connection {
  std::unique_ptr<Communicator> world;
  std::unique_ptr<ControlChannel> control;
  // Where cached tensors can be agreed on without the coordinator; null when the transport has
  // none (only negotiation over shared memory offers one).
  std::unique_ptr<AgreementBoard> board;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual std::string name() const = 0;
  virtual Connection connect(const ConnectOptions& options, Store& store) = 0;

  // A transport that can serve the ranks of one host beside another transport's connection (shared
  // memory beside TCP) offers these two; the others keep the defaults (nothing taken over).
  //
  // Collective over all ranks of `connection`: true when its world (and control, where allowed)
  // now runs over this transport; false, with a logged reason, when it kept what it had.
  virtual bool takeOverHost(Connection& /*connection*/, const ConnectOptions& /*options*/,
                            Store& /*store*/, bool /*disabled*/) {
    return false;
  }
  // Collective over the ranks of one host (options.rank and size are this rank's index on the
  // host and the host's rank count; store keeps this host's keys apart; jobRanks[i] is the job's
  // rank of the host's rank i): a communicator of the host's ranks, or null with *whyNot set.
  virtual std::unique_ptr<Communicator> hostCommunicator(const ConnectOptions& /*options*/,
                                                         Store& /*store*/, bool /*disabled*/,
                                                         const std::vector<int>& /*jobRanks*/,
                                                         std::string* whyNot) {
    *whyNot = "the " + name() + " transport cannot serve one host's ranks on its own";
    return nullptr;
  }
};

// "tcp" (alias "gloo"), "shm" (TCP plus shared memory, shm/transport.h) and, when built, "mpi".
// Throws InvalidArgument for other names, and NotSupported for a known transport this build lacks.
std::unique_ptr<Transport> makeTransport(const std::string& name);

}  // namespace hora
