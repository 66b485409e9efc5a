#pragma once
// Binary encoding of negotiation messages. Little-endian, length-prefixed fields, a version byte
// at the start of every batch. Decoding checks every length against the remaining bytes and
// throws IoError on a malformed message, so a corrupt frame can never read out of bounds.
#include <cstdint>
#include <string>
#include <vector>

#include "core/messages/messages.h"

namespace hora {

// Control-channel liveness (core/coordinator/liveness.h): a batch marked Ping or Pong carries
// nothing else and is neither ingested nor applied. A Ping asks the receiver's background loop
// for a Pong at once; a Pong only shows that its sender is alive.
enum class Heartbeat : uint8_t { None = 0, Ping = 1, Pong = 2 };
constexpr uint8_t kMaxHeartbeat = 2;

// What a rank tells the coordinator: tensors newly ready, as full requests or as cache bits.
struct RequestBatch {
  uint64_t appliedBatches = 0;      // response batches this rank had applied when it sent this
  std::vector<uint64_t> cacheBits;  // bit s set: the request cached in slot s is ready again
  std::vector<Request> requests;
  bool shutdown = false;  // this rank is shutting down
  bool waiting = false;   // a frontend thread of this rank is blocked in a wait without timeout
  Heartbeat heartbeat = Heartbeat::None;
};

// What the coordinator tells every rank, in the order every rank must follow.
struct ResponseBatch {
  uint64_t sequence = 0;
  std::vector<int32_t> evictedSlots;  // applied before the responses
  std::vector<Response> responses;
  double cycleTimeMs = -1;       // >= 0: every rank adopts this cycle time (autotune)
  int64_t fusionThreshold = -1;  // >= 0: the threshold rank 0 fuses with now (autotune;
                                 // only rank 0 fuses, the others report it)
  bool shutdown = false;
  std::string shutdownReason;
  Heartbeat heartbeat = Heartbeat::None;
};

std::string encodeRequestBatch(const RequestBatch& b);
RequestBatch decodeRequestBatch(const std::string& bytes);
std::string encodeResponseBatch(const ResponseBatch& b);
ResponseBatch decodeResponseBatch(const std::string& bytes);

}  // namespace hora
