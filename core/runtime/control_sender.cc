#include "core/runtime/control_sender.h"

#include <vector>

#include "core/common/errors.h"
#include "core/coordinator/codec.h"

namespace hora {

ControlSender::ControlSender(ControlChannel& channel, ApplyArrived applyArrived)
    : channel_(&channel),
      applyArrived_(std::move(applyArrived)),
      coordinator_(channel.rank() == 0) {}

void ControlSender::send(int to, const std::string& bytes) {
  channel_->send(to, bytes);
  sent_.fetch_add(1, std::memory_order_relaxed);
}

void ControlSender::toWorkers(const std::string& bytes, bool bestEffort) {
  if (channel_->size() < 2) return;
  channel_->broadcast(bytes, bestEffort);
  // Counted per rank it is meant for, as when each got its own send.
  sent_.fetch_add(static_cast<uint64_t>(channel_->size() - 1), std::memory_order_relaxed);
}

void ControlSender::toCoordinator(const RequestBatch& batch) {
  try {
    send(0, encodeRequestBatch(batch));
  } catch (const IoError&) {
    std::vector<ControlChannel::Message> arrived;
    channel_->poll(arrived, Millis(0));  // throws when nothing more came
    for (const auto& m : arrived) {
      ResponseBatch b = decodeResponseBatch(m.bytes);
      if (b.heartbeat != Heartbeat::None) continue;
      if (applyArrived_(b)) return;
    }
    throw;
  }
}

bool ControlSender::answerHeartbeat(int from, Heartbeat kind, uint64_t applied) {
  if (kind == Heartbeat::None) return false;
  if (kind == Heartbeat::Ping) heartbeat(from, Heartbeat::Pong, applied);
  return true;
}

void ControlSender::heartbeat(int peer, Heartbeat kind, uint64_t applied) {
  if (coordinator_) {
    ResponseBatch b;
    b.heartbeat = kind;
    send(peer, encodeResponseBatch(b));
  } else {
    RequestBatch b;
    b.appliedBatches = applied;
    b.heartbeat = kind;
    toCoordinator(b);
  }
}

}  // namespace hora
