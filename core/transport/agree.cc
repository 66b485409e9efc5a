#include "core/transport/agree.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/common/errors.h"

namespace hora {
namespace {

// A 64-bit FNV-1a digest: equal values always agree, and different ones collide too rarely to
// matter for a check of start-up arguments.
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

template <typename T>
std::vector<T> gatherOne(Communicator& world, T mine) {
  std::vector<T> all(static_cast<size_t>(world.size()));
  world.allgatherv(&mine, all.data(), std::vector<size_t>(all.size(), sizeof(T)));
  return all;
}

}  // namespace

void requireSameOnEveryRank(Communicator& world, const std::string& value,
                            const std::string& what) {
  if (world.size() == 1) return;
  // The digests decide; the values themselves travel only when they differ (every rank sees the
  // same digests, so every rank takes the same branch).
  std::vector<uint64_t> digests = gatherOne<uint64_t>(world, fnv1a(value));
  if (std::all_of(digests.begin(), digests.end(), [&](uint64_t d) { return d == digests[0]; })) {
    return;
  }
  // The lengths travel first, since allgatherv needs every rank's byte count before the values.
  std::vector<uint64_t> lengths = gatherOne<uint64_t>(world, value.size());
  std::vector<size_t> bytes(lengths.begin(), lengths.end());
  size_t total = 0;
  for (size_t b : bytes) total += b;
  std::string every(total, '\0');
  world.allgatherv(value.data(), &every[0], bytes);
  std::string message = "ranks disagree on " + what + ":";
  size_t at = 0;
  for (size_t r = 0; r < bytes.size(); ++r) {
    message += (r ? "; " : " ") + std::string("rank ") + std::to_string(r) + " gave " +
               every.substr(at, bytes[r]);
    at += bytes[r];
  }
  throw InvalidArgument(message + ". Every rank must pass the same ones, in the same order");
}

bool trueOnEveryRank(Communicator& world, bool mine) {
  if (world.size() == 1) return mine;
  std::vector<uint8_t> all = gatherOne<uint8_t>(world, mine ? 1 : 0);
  return std::all_of(all.begin(), all.end(), [](uint8_t v) { return v == 1; });
}

int64_t rankZeroValue(Communicator& world, int64_t value) {
  if (world.size() == 1) return value;
  return gatherOne<int64_t>(world, value)[0];
}

}  // namespace hora
