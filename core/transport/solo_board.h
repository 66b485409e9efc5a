#pragma once
// SoloBoard: the AgreementBoard (agreement_board.h) of a world of one rank. The rank agrees with
// itself, so each round it publishes is resolvable at once: a cached tensor runs without a trip
// through the coordinator, and a waiting caller can run it itself (core/runtime/background_loop.h).
//
// Threads: as AgreementBoard.
#include "core/common/errors.h"
#include "core/transport/agreement_board.h"

namespace hora {

class SoloBoard : public AgreementBoard {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void publish(uint32_t round, const Round& mine) override {
    HORA_CHECK(round == round_ + 1, "agreement rounds are published in order");
    round_ = round;
    copyRound(mine, &last_);
  }
  uint32_t published(int) const override { return round_; }
  void read(int, uint32_t, Round* out) const override { copyRound(last_, out); }
  void looked() override {}  // no other rank publishes, so no wait needs ending

 private:
  uint32_t round_ = 0;
  Round last_;
};

}  // namespace hora
