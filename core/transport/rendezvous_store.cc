#include "core/transport/rendezvous_store.h"

#include <algorithm>
#include <optional>

namespace hora {
namespace {

// The longest single wait of awaitRanks: after each, it asks only for the ranks still missing, so
// that a store failing later names only those.
constexpr Millis kAwaitSlice{1000};

}  // namespace

std::string storeOwnerName(StoreOwner owner) {
  return owner == StoreOwner::Rank0 ? "rank 0" : "the launcher";
}

std::string rankList(const std::vector<int>& ranks) {
  std::string text;
  for (int r : ranks) text += (text.empty() ? "" : ", ") + std::to_string(r);
  return text;
}

void throwStoreFailure(const ConnectOptions& o, const Error& cause, const std::string& doing) {
  const std::string who = "rank " + std::to_string(o.rank) + ": the rendezvous store, served by " +
                          storeOwnerName(o.storeOwner);
  // The store is there and well: it holds another secret than this rank.
  // Kept as an AuthenticationError: a wrong secret is the user's to fix, not a store that went
  // away.
  if (dynamic_cast<const AuthenticationError*>(&cause) != nullptr) {
    throw AuthenticationError(who + ", refused this rank while it was " + doing + ": " +
                              cause.what());
  }
  // What ends the store, so that the reader knows whose output explains it.
  const char* why = o.storeOwner == StoreOwner::Rank0
                        ? "rank 0 serves it from its hora.init() until its process exits: see "
                          "rank 0's output for why it ended"
                        : "the launcher serves it for the whole job: it stopped the job, or a "
                          "newer generation of an elastic job replaced this one";
  std::string text =
      who + ", failed while this rank was " + doing + ": " + cause.what() + " (" + why + ")";
  if (cause.code() == ErrorCode::Timeout) throw TimeoutError(text);
  throw IoError(text);
}

std::vector<std::string> awaitRanks(const ConnectOptions& o, Store& store,
                                    const std::vector<int>& ranks,
                                    const std::function<std::string(int)>& keyOf,
                                    Clock::time_point deadline, const std::string& purpose) {
  std::vector<std::string> values(ranks.size());
  std::vector<size_t> pending;  // indices into ranks whose value has not arrived
  for (size_t i = 0; i < ranks.size(); ++i) pending.push_back(i);
  // The first request only looks, even past the deadline: what is there already is taken, and
  // only the ranks still missing are waited for (and named if the store fails meanwhile).
  bool looked = false;
  while (!pending.empty()) {
    std::vector<std::string> keys;
    std::vector<int> missing;
    for (size_t i : pending) {
      keys.push_back(keyOf(ranks[i]));
      missing.push_back(ranks[i]);
    }
    Millis wait(0);
    if (looked) {
      auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
      if (left <= Millis(0)) {
        throw TimeoutError("rank " + std::to_string(o.rank) + ": timed out after " +
                           std::to_string(o.startTimeout.count()) + " ms waiting for rank(s) " +
                           rankList(missing) + " to " + purpose + " (not started, or failed)");
      }
      wait = std::min(left, kAwaitSlice);
    }
    looked = true;
    const std::string doing = "waiting for rank(s) " + rankList(missing) + " to " + purpose;
    std::vector<std::optional<std::string>> got =
        storeCall(o, doing, [&] { return store.getMany(keys, wait); });
    std::vector<size_t> still;
    for (size_t j = 0; j < pending.size(); ++j) {
      if (got[j]) {
        values[pending[j]] = std::move(*got[j]);
      } else {
        still.push_back(pending[j]);
      }
    }
    pending.swap(still);
  }
  return values;
}

}  // namespace hora
