#pragma once
// ShmControlChannel: ControlChannel (core/transport/control_channel.h) over the control rings of
// the job's shared segment (segment.h), for jobs whose ranks all run on one host. It replaces the
// loopback TCP control connections, saving two TCP hops per negotiation round.
//
// Messages travel as the same frames as on TCP (net::kControlMagic, version, length) through a
// single-producer single-consumer byte ring per direction between rank 0 and each other rank. A
// frame larger than the free space goes in pieces as the reader frees room; the reader keeps a
// partial frame until the rest arrives. Writers ring the reader's doorbell after each piece;
// poll() waits on this rank's doorbell (wait.h: pause, yield for `spin`, then futex) until an
// inbound ring has bytes, wakeup() was called, another rank published on the agreement board
// (agreement_board.h), or the timeout passes. send() waiting for room keeps
// draining the inbound rings into a stash (rank 0 and a rank both sending big messages never wait
// on each other), fails with TimeoutError when nothing moves for the op timeout, and with IoError
// as soon as the peer is gone. A peer whose channel closed or whose process exited makes poll()
// throw IoError naming it, like a closed TCP control connection, once what it wrote before has been
// delivered. A collective that fails marks the rank gone for the data path only: the channel keeps
// the segment mapped and still carries the failure's reason to the others.
//
// Threads: send() and poll() on the background thread (which also owns the collectives on the same
// ShmPeers); wakeup() from any thread.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/common/time.h"
#include "core/transport/control_channel.h"
#include "core/transport/shm/links.h"

namespace hora {
namespace shm {

class ShmControlChannel : public ControlChannel {
 public:
  ShmControlChannel(std::shared_ptr<ShmPeers> peers, Millis opTimeout);
  ~ShmControlChannel() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backendName() const override { return "shm"; }
  void send(int to, const std::string& bytes) override;
  void poll(std::vector<Message>& out, Millis timeout, Micros spin = Micros(0)) override;
  void wakeup() override;

 private:
  struct Inbound {
    int rank;
    std::string partial;  // bytes taken from the ring that do not yet make a whole frame
  };

  // Takes what the ring from `in.rank` holds now, appending every whole message to out.
  void readAvailable(Inbound& in, std::vector<Message>& out);
  bool anyInbound() const;
  // Why the peers this rank talks to are gone, as the IoError text; "" while all are there.
  std::string peersGone() const;
  // "" while `peer`'s control channel is open and its process runs, else why not. A peer whose
  // collective failed is not gone here until it closes the channel.
  std::string controlGone(int peer) const;
  [[noreturn]] void fail(int peer, const std::string& why) const;

  std::shared_ptr<ShmPeers> peers_;
  int rank_;
  int size_;
  Millis opTimeout_;
  std::vector<Inbound> inbound_;  // rank 0: every other rank; others: rank 0
  std::vector<Message> stash_;    // messages read while send() waited for room
  std::atomic<uint64_t> wakeups_{0};
  uint64_t wakeupsSeen_ = 0;
};

}  // namespace shm
}  // namespace hora
