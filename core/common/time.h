#pragma once
// One clock and one duration type for every timeout in the engine.
#include <chrono>

namespace hora {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;
using Micros = std::chrono::microseconds;

inline Millis secondsToMillis(double s) { return Millis(static_cast<long long>(s * 1000.0)); }

// Whole milliseconds from now until t, rounded up; zero once t has passed.
inline Millis millisUntil(Clock::time_point t, Clock::time_point now) {
  return t <= now ? Millis(0) : std::chrono::ceil<Millis>(t - now);
}

}  // namespace hora
