#include "core/net/fault_injection.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/common/logging.h"
#include "core/common/settings.h"

namespace hora {
namespace net {
namespace {

struct FaultPlan {
  bool armed = false;
  size_t closeAfterBytes = 0;
};

const char* rankFromEnvironment() {
  for (const char* name :
       {"HORA_RANK", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "RANK"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return v;
  }
  return nullptr;
}

bool parseCount(const std::string& text, long long* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || v < 0) return false;
  *out = v;
  return true;
}

FaultPlan readPlan() {
  FaultPlan plan;
  std::string text;
  if (!lookupEnv("FAULT_INJECT", &text)) return plan;
  long long bytes = -1;
  long long rank = -1;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t eq = item.find('=');
    std::string key = item.substr(0, eq);
    std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    long long parsed = 0;
    if (key == "close_after_bytes" && parseCount(value, &parsed)) {
      bytes = parsed;
    } else if (key == "rank" && parseCount(value, &parsed)) {
      rank = parsed;
    } else {
      HORA_LOG(Warning, "HORA_FAULT_INJECT: ignoring it, cannot read '" + item + "'");
      return plan;
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (bytes < 0) return plan;
  if (rank >= 0) {
    const char* mine = rankFromEnvironment();
    if (mine == nullptr || std::to_string(rank) != mine) return plan;
  }
  plan.armed = true;
  plan.closeAfterBytes = static_cast<size_t>(bytes);
  HORA_LOG(Warning, "HORA_FAULT_INJECT: a connection will be cut after " + std::to_string(bytes) +
                        " bytes sent");
  return plan;
}

// Process-wide on purpose: the plan is the environment's, and the budget spans every connection.
std::atomic<size_t> sentBytes{0};
std::atomic<bool> fired{false};

}  // namespace

FaultDecision faultBeforeSend(size_t bytes) {
  static const FaultPlan plan = readPlan();
  if (!plan.armed || fired.load(std::memory_order_relaxed)) return {bytes, false};
  size_t before = sentBytes.fetch_add(bytes);
  if (before + bytes <= plan.closeAfterBytes) return {bytes, false};
  if (fired.exchange(true)) return {bytes, false};
  return {before >= plan.closeAfterBytes ? 0 : plan.closeAfterBytes - before, true};
}

}  // namespace net
}  // namespace hora
