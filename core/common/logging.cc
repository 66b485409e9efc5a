#include "core/common/logging.h"

#include <strings.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace hora {
namespace {

std::atomic<int> gLevel{static_cast<int>(LogLevel::Warning)};
std::atomic<int> gRank{-1};
std::atomic<bool> gHideTime{false};
constexpr int kNoThreadRank = -2;  // this thread has no LogRankScope: use gRank
thread_local int tRank = kNoThreadRank;

const char* kNames[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"};

}  // namespace

void setLogLevel(const std::string& level) {
  for (int i = 0; i < 6; ++i) {
    if (strcasecmp(level.c_str(), kNames[i]) == 0) gLevel = i;
  }
}

void setLogRank(int rank) { gRank = rank; }
void setLogHideTime(bool hide) { gHideTime = hide; }

int currentLogRank() { return tRank != kNoThreadRank ? tRank : gRank.load(); }

LogRankScope::LogRankScope(int rank) : previous_(tRank) { tRank = rank; }
LogRankScope::~LogRankScope() { tRank = previous_; }

bool logEnabled(LogLevel level) { return static_cast<int>(level) >= gLevel.load(); }

void logLine(LogLevel level, const std::string& message) {
  char stamp[32] = "";
  if (!gHideTime) {
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    std::strftime(stamp, sizeof(stamp), "%Y-%m-%d %H:%M:%S ", &tm);
  }
  std::string line = std::string("[") + stamp + "hora " + kNames[static_cast<int>(level)];
  int rank = currentLogRank();
  if (rank >= 0) line += " rank " + std::to_string(rank);
  line += "] " + message + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace hora
