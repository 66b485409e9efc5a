#include "core/transport/rendezvous_store.h"

#include <algorithm>

namespace hora {

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
  std::vector<std::string> values;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::string doing = "waiting for rank(s) " + std::to_string(ranks[i]) + " to " + purpose;
    // One deadline for all the ranks: later ranks get what time the earlier ones left. A deadline
    // that has passed still allows a zero-wait get, so a key already there is taken.
    auto left = std::max(Millis(0), std::chrono::duration_cast<Millis>(deadline - Clock::now()));
    try {
      values.push_back(store.get(keyOf(ranks[i]), left));
      continue;
    } catch (const IoError& e) {
      throwStoreFailure(o, e, doing);
    } catch (const TimeoutError&) {
      // The store answered that the key is still missing at the deadline: see which others are.
    }
    std::vector<int> missing;
    // The timeout names every rank still missing, not only the first one found missing.
    for (size_t j = i; j < ranks.size(); ++j) {
      bool there = storeCall(o, doing, [&] { return store.check({keyOf(ranks[j])}); });
      if (!there) missing.push_back(ranks[j]);
    }
    if (missing.empty()) {  // every key arrived just after the deadline: take them
      for (size_t j = i; j < ranks.size(); ++j) {
        values.push_back(
            storeCall(o, doing, [&] { return store.get(keyOf(ranks[j]), Millis(0)); }));
      }
      return values;
    }
    throw TimeoutError("rank " + std::to_string(o.rank) + ": timed out after " +
                       std::to_string(o.startTimeout.count()) + " ms waiting for rank(s) " +
                       rankList(missing) + " to " + purpose + " (not started, or failed)");
  }
  return values;
}

}  // namespace hora
