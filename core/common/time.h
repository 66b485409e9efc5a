#pragma once
// One clock and one duration type for every timeout in the engine.
#include <chrono>

namespace hora {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;
using Micros = std::chrono::microseconds;

inline Millis secondsToMillis(double s) { return Millis(static_cast<long long>(s * 1000.0)); }

}  // namespace hora
