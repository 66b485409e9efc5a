#pragma once
// Minimal leveled logging to stderr, prefixed with the rank. Thread-safe (one write per line).
// The level comes from HORA_LOG_LEVEL at init; messages below it cost one integer compare.
#include <sstream>
#include <string>

namespace hora {

enum class LogLevel { Trace = 0, Debug, Info, Warning, Error, Fatal };

void setLogLevel(const std::string& level);  // unknown names leave the level unchanged
void setLogRank(int rank);
void setLogHideTime(bool hide);
bool logEnabled(LogLevel level);
void logLine(LogLevel level, const std::string& message);

}  // namespace hora

#define HORA_LOG(level, expr)                                          \
  do {                                                                 \
    if (::hora::logEnabled(::hora::LogLevel::level)) {                 \
      std::ostringstream hora_log_stream_;                             \
      hora_log_stream_ << expr;                                        \
      ::hora::logLine(::hora::LogLevel::level, hora_log_stream_.str()); \
    }                                                                  \
  } while (0)
