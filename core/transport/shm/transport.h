#pragma once
// The shared-memory transport: collectives between ranks that all run on one host go through one
// shared segment (setup.h) instead of the loopback TCP stack, and so does negotiation
// (control_channel.h) when every rank allows it (HORA_SHM_CONTROL, ConnectOptions::shmControl)
// and the control plane is this job's TCP one. Two ways in:
// - preferSharedMemory() (Transport::takeOverHost): what the runtime does by default when the
//   data transport is TCP. It
//   replaces the world communicator with the shared-memory one when every rank runs on this host
//   and none set HORA_SHM_DISABLE, and otherwise keeps the TCP one and logs one line saying why.
// - ShmTransport ("shm"): TCP plus shared memory, failing with NotSupported when shared memory
//   cannot be set up (for tests that must run over shared memory).
#include <string>
#include <vector>

#include "core/transport/transport.h"

namespace hora {
namespace shm {

// Bytes of each rank-pair ring when none are configured (HORA_SHM_RING_BYTES).
constexpr size_t kDefaultRingBytes = 512 << 10;

// Collective over all ranks. Returns true when connection.world now runs over shared memory
// (connection.control then does too, when it was TCP and every rank allows it).
bool preferSharedMemory(Connection& connection, const ConnectOptions& options, Store& store,
                        bool disabled);

// Collective over the ranks of one host (options.rank and size are this rank's index on the
// host and the host's rank count; store keeps this host's keys apart from other hosts'): a
// communicator of the host's ranks over a segment of their own, or null with *whyNot set when
// they cannot share memory. Every rank of the host gets the same verdict. jobRanks[i] is the
// job's rank of the host's rank i: errors name ranks by it.
std::unique_ptr<Communicator> hostCommunicator(const ConnectOptions& options, Store& store,
                                               bool disabled, const std::vector<int>& jobRanks,
                                               std::string* whyNot);

// The registry's "shm"; the runtime reaches the two functions above through it (Transport).
class ShmTransport : public Transport {
 public:
  std::string name() const override { return "shm"; }
  Connection connect(const ConnectOptions& options, Store& store) override;
  bool takeOverHost(Connection& connection, const ConnectOptions& options, Store& store,
                    bool disabled) override {
    return preferSharedMemory(connection, options, store, disabled);
  }
  std::unique_ptr<Communicator> hostCommunicator(const ConnectOptions& options, Store& store,
                                                 bool disabled, const std::vector<int>& jobRanks,
                                                 std::string* whyNot) override {
    return shm::hostCommunicator(options, store, disabled, jobRanks, whyNot);
  }
};

}  // namespace shm
}  // namespace hora
