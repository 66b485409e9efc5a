#pragma once
// Minimal leveled logging to stderr, prefixed with the rank. Thread-safe (one write per line).
// The level comes from HORA_LOG_LEVEL at init; messages below it cost one integer compare.
//
// The rank in the prefix belongs to the thread that logs: a Runtime sets it (LogRankScope) on its
// own threads, so several runtimes in one process (ranks as threads in tests) each print their
// own rank. Threads without a scope print the process default from setLogRank(), if any.
#include <sstream>
#include <string>

namespace hora {

enum class LogLevel { Trace = 0, Debug, Info, Warning, Error, Fatal };

void setLogLevel(const std::string& level);  // unknown names leave the level unchanged
void setLogRank(int rank);                   // process default; -1 = no rank in the prefix
void setLogHideTime(bool hide);
bool logEnabled(LogLevel level);
void logLine(LogLevel level, const std::string& message);
// The rank lines logged from this thread carry now (-1: none).
int currentLogRank();

// Sets the rank of lines logged from the calling thread while it lives; restores the previous one.
class LogRankScope {
 public:
  explicit LogRankScope(int rank);
  ~LogRankScope();
  LogRankScope(const LogRankScope&) = delete;
  LogRankScope& operator=(const LogRankScope&) = delete;

 private:
  int previous_;
};

}  // namespace hora

#define HORA_LOG(level, expr)                                           \
  do {                                                                  \
    if (::hora::logEnabled(::hora::LogLevel::level)) {                  \
      std::ostringstream hora_log_stream_;                              \
      hora_log_stream_ << expr;                                         \
      ::hora::logLine(::hora::LogLevel::level, hora_log_stream_.str()); \
    }                                                                   \
  } while (0)
