#pragma once
// ShmAgreementBoard: the AgreementBoard (core/transport/agreement_board.h) in the job's shared
// segment. Each rank's block holds its last published round number and two round buffers
// (segment.h); publish() fills buffer round & 1, then stores the number (release) and rings every
// other rank's doorbell, so a control channel waiting on that doorbell wakes
// (ShmPeers::boardInUse). It exists only beside a ShmControlChannel, which keeps the segment mapped
// for as long as the ShmPeers live, failures included.
#include <memory>

#include "core/transport/agreement_board.h"
#include "core/transport/shm/links.h"

namespace hora {
namespace shm {

class ShmAgreementBoard : public AgreementBoard {
 public:
  explicit ShmAgreementBoard(std::shared_ptr<ShmPeers> peers);
  ~ShmAgreementBoard() override;

  int rank() const override { return peers_->worldRank; }
  int size() const override { return peers_->worldSize; }
  void publish(uint32_t round, const Round& mine) override;
  uint32_t published(int r) const override;
  void read(int r, uint32_t round, Round* out) const override;
  void looked() override {
    peers_->boardSeen.store(peers_->othersRounds(), std::memory_order_relaxed);
  }

 private:
  std::shared_ptr<ShmPeers> peers_;
};

}  // namespace shm
}  // namespace hora
