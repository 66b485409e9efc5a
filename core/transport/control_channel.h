#pragma once
// ControlChannel: the control plane between the coordinator (world rank 0) and every other rank.
// Negotiation messages travel here, never on the data connections, so a collective in progress
// never reads a control message by mistake.
//
// Contract:
// - Messages are opaque byte strings delivered whole and in order per sender.
// - Rank 0 may send to any rank; other ranks send only to rank 0.
// - send() and poll() are called from the background thread only; wakeup() from any thread.
// - poll() blocks until at least one message is available, wakeup() was called, or the timeout
//   passes (a negative timeout waits forever); it appends what arrived to `out`. For the first
//   `spin` of that wait it polls, yielding the core, instead of sleeping (core/common/spin.h).
//   A peer whose connection closes or who sends a malformed frame makes poll() throw IoError
//   naming that rank.
#include <string>
#include <vector>

#include "core/common/time.h"

namespace hora {

class ControlChannel {
 public:
  struct Message {
    int from;
    std::string bytes;
  };

  virtual ~ControlChannel() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The backend that carries the messages ("tcp", "shm", "mpi"): how another backend asks whose
  // channel it holds without knowing that backend's types.
  virtual std::string backendName() const = 0;
  virtual void send(int to, const std::string& bytes) = 0;
  // Rank 0 only: the same bytes to every other rank, each receiving them as a message from rank 0.
  // bestEffort: a rank that cannot be reached is skipped (else the first failure throws). A
  // channel that can do better than one send per rank (the TCP tree) overrides it.
  virtual void broadcast(const std::string& bytes, bool bestEffort = false);
  virtual void poll(std::vector<Message>& out, Millis timeout, Micros spin = Micros(0)) = 0;
  // The ranks that relay messages between this rank and `peer` (in order, e.g. "1, 4"), or ""
  // when they travel directly: a peer that falls silent may be one of them.
  virtual std::string relays(int /*peer*/) const { return ""; }
  virtual void wakeup() = 0;
};

}  // namespace hora
