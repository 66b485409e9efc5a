#include "core/transport/shm/agreement_board.h"

#include <algorithm>
#include <cstring>

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
  AgreementRound& buffer = me.rounds[round & 1];
  buffer.applied = mine.applied;
  buffer.joined = mine.joined;
  std::memcpy(buffer.ready, mine.ready, sizeof(buffer.ready));
  std::memcpy(buffer.handedOver, mine.handedOver, sizeof(buffer.handedOver));
  buffer.eagerSlot = mine.eagerSlot;
  buffer.eagerBytes = mine.eagerSlot != 0 ? mine.eagerBytes : 0;
  if (buffer.eagerBytes > 0) std::memcpy(buffer.eager, mine.eager, buffer.eagerBytes);
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
  const AgreementRound& buffer = peers_->segment.rank(r).rounds[round & 1];
  out->applied = buffer.applied;
  out->joined = buffer.joined;
  std::memcpy(out->ready, buffer.ready, sizeof(out->ready));
  std::memcpy(out->handedOver, buffer.handedOver, sizeof(out->handedOver));
  out->eagerSlot = buffer.eagerSlot;
  // Bounded by the payload's room: the segment is shared with other processes.
  out->eagerBytes = std::min<uint64_t>(buffer.eagerBytes, sizeof(out->eager));
  if (out->eagerBytes > 0) std::memcpy(out->eager, buffer.eager, out->eagerBytes);
}

}  // namespace shm
}  // namespace hora
