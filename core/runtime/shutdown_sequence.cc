#include "core/runtime/shutdown_sequence.h"

#include <algorithm>

#include "core/common/logging.h"

namespace hora {
namespace {

const char* kShutdownText =
    "Hora has been shut down. This was caused by an exception on one of the ranks or an attempt "
    "to run a collective after one of the ranks finished execution";

}  // namespace

bool ShutdownSequence::start(Clock::time_point now) {
  if (sent_ || !requested_.load(std::memory_order_acquire)) return false;
  sent_ = true;
  deadline_ = now + kAckTimeout;
  return true;
}

bool ShutdownSequence::expired(Clock::time_point now, Millis* wait) {
  if (!sent_) return false;
  if (now >= deadline_) {
    HORA_LOG(Warning, "the coordinator did not acknowledge shutdown; leaving anyway");
    stopped_ = true;
    return true;
  }
  auto left = std::chrono::ceil<Millis>(deadline_ - now);
  *wait = wait->count() < 0 ? left : std::min(*wait, left);
  return false;
}

void ShutdownSequence::stop(const std::string& reason) {
  reason_ = reason;
  stopped_ = true;
}

std::string ShutdownSequence::cleanStopMessage() const {
  std::string text = kShutdownText;
  if (!reason_.empty()) text += " (" + reason_ + ")";
  return text;
}

}  // namespace hora
