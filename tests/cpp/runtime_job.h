#pragma once
// runJob: a job of n ranks as threads of this process, each with its own Runtime, all on this
// host (so over shared memory unless a tweak says otherwise), meeting at a TCP rendezvous store
// served here. body runs on every rank between start and shutdown; tweak adjusts each rank's
// options first.
#include <functional>

#include "core/runtime.h"
#include "core/store/tcp_store.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace test {

inline void runJob(int n, const std::function<void(Runtime&, int)>& body,
                   const std::function<void(RuntimeOptions&)>& tweak = nullptr) {
  const char* secret = "runtime-job-secret";
  TcpStoreServer server("127.0.0.1", 0, secret);
  spawnRanks(n, [&](int rank) {
    RuntimeOptions o;
    o.topology.rank = rank;
    o.topology.size = n;
    o.topology.localRank = rank;
    o.topology.localSize = n;
    o.storeHost = "127.0.0.1";
    o.storePort = server.port();
    o.secret = secret;
    o.listenHost = "127.0.0.1";
    o.settings.startTimeoutSeconds = 20;
    o.settings.timeoutSeconds = 20;
    if (tweak) tweak(o);
    auto rt = Runtime::start(o);
    body(*rt, rank);
    rt->shutdown();
  });
}

}  // namespace test
}  // namespace hora
