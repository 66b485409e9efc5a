#include "core/transport/shm/agreement_board.h"

#include "core/common/errors.h"

namespace hora {
namespace shm {

ShmAgreementBoard::ShmAgreementBoard(std::shared_ptr<ShmPeers> peers) : peers_(std::move(peers)) {
  HORA_CHECK(peers_->controlInUse, "an agreement board needs the shared-memory control channel");
  // From here on the control channel's waits also end when another rank publishes a round, which is
  // how a rank waiting for messages learns of a new round.
  peers_->boardInUse = true;
}

ShmAgreementBoard::~ShmAgreementBoard() { peers_->boardInUse = false; }

void ShmAgreementBoard::publish(uint32_t round, const Round& mine) {
  RankBlock& me = peers_->segment.rank(peers_->worldRank);
  HORA_CHECK(round == me.agreement.round.load(std::memory_order_relaxed) + 1,
             "agreement rounds are published in order");
  // The other buffer holds the previous round, which peers may still be reading; this one held the
  // round before it, which every rank has read (agreement_board.h).
  copyRound(mine, &me.rounds[round & 1]);
  // Release after the plain writes above: a peer that acquires the new round number sees the whole
  // buffer.
  me.agreement.round.store(round, std::memory_order_release);
  for (int r = 0; r < peers_->worldSize; ++r) {
    if (r != peers_->worldRank) ring(peers_->doorbell(r));
  }
}

uint32_t ShmAgreementBoard::published(int r) const {
  return peers_->segment.rank(r).agreement.round.load(std::memory_order_acquire);
}

void ShmAgreementBoard::read(int r, uint32_t round, Round* out) const {
  copyRound(peers_->segment.rank(r).rounds[round & 1], out);
}

}  // namespace shm
}  // namespace hora
