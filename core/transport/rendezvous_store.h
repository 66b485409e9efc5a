#pragma once
// The rendezvous steps' use of the store, and what a rank says when the store fails under it.
//
// The store client knows only its address ("store at 127.0.0.1:29501: connection closed by
// peer"). A rank in the rendezvous also knows who serves the store (ConnectOptions::storeOwner)
// and which ranks it is waiting for; every step adds both to a failure of the store, keeping the
// error's class (IoError; TimeoutError for a store that stopped answering). In a job without a
// launcher rank 0 serves the store, and when rank 0 exits (its own start timeout passed, or it
// failed) the ranks still waiting must say for whom, not only that a socket closed.
#include <functional>
#include <string>
#include <vector>

#include "core/common/errors.h"
#include "core/common/time.h"
#include "core/store/store.h"
#include "core/transport/transport.h"

namespace hora {

// "rank 0" or "the launcher".
std::string storeOwnerName(StoreOwner owner);

// "1, 4, 5".
std::string rankList(const std::vector<int>& ranks);

// Throws `cause`, a failure of the store, again with the same class, the store's owner and what
// this rank was `doing` ("waiting for rank(s) 1 to publish their address") before its own text.
[[noreturn]] void throwStoreFailure(const ConnectOptions& o, const Error& cause,
                                    const std::string& doing);

// Runs `call`, one store call of a rendezvous step; a failure of the store (IoError, or a
// TimeoutError of a store that stopped answering) leaves it through throwStoreFailure().
template <typename Call>
auto storeCall(const ConnectOptions& o, const std::string& doing, Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const IoError& e) {
    throwStoreFailure(o, e, doing);
  } catch (const TimeoutError& e) {
    throwStoreFailure(o, e, doing);
  }
}

// Waits until each rank of `ranks` has set keyOf(rank) and returns the values, in that order. One
// request asks for every key still missing (Store::getMany), so awaiting all N ranks costs a rank a
// few requests, not N; a failure of the store names the ranks not seen yet. Past `deadline`,
// TimeoutError "rank R: timed out after <startTimeout> ms waiting for rank(s) <every rank still
// missing> to <purpose> (not started, or failed)".
std::vector<std::string> awaitRanks(const ConnectOptions& o, Store& store,
                                    const std::vector<int>& ranks,
                                    const std::function<std::string(int)>& keyOf,
                                    Clock::time_point deadline, const std::string& purpose);

}  // namespace hora
