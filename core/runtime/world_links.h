#pragma once
// WorldLinks: what start-up connects (the rendezvous store, the world communicator, the control
// channel, the shared-memory board of local agreement) and the process sets given to init.
//
// connectWorld() and addStaticProcessSets() run on the thread that starts the runtime, before the
// background thread exists; they block at most HORA_START_TIMEOUT each step and throw on failure.
// Afterwards the background thread owns every member (but for the const reads the comments name);
// the loop releases world and control when it stops (under LoopWaker's lock).
// Declared in teardown order: later members may use earlier ones.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/common/settings.h"
#include "core/coordinator/local_agreement.h"
#include "core/coordinator/process_set_table.h"
#include "core/runtime.h"
#include "core/store/store.h"
#include "core/store/tcp_store.h"
#include "core/transport/capabilities.h"
#include "core/transport/communicator.h"
#include "core/transport/connect.h"
#include "core/transport/control_channel.h"

namespace hora {

struct WorldLinks {
  std::string transportName;                    // read by any thread after start-up
  ConnectOptions options;                       // as the world connected (reused by later paths)
  std::unique_ptr<TcpStoreServer> storeServer;  // rank 0, when the store was bootstrapped
  std::unique_ptr<Store> baseStore;
  std::unique_ptr<Store> store;  // this init's keys
  std::unique_ptr<Communicator> world;
  std::shared_ptr<SharedPool> sharedPool;  // world's, kept from start-up on
  Capabilities dataCapabilities;           // world's, read by enqueue() on the caller's thread
  std::unique_ptr<ControlChannel> control;
  // Cached tensors agreed on among the ranks (local_agreement.h); null: every tensor goes to the
  // coordinator. The background loop takes it.
  std::unique_ptr<LocalAgreement> agreement;
  int64_t agreedFusionThreshold = 0;  // rank 0's, for what agreement runs
};

WorldLinks connectWorld(const RuntimeOptions& options, const Settings& settings);

// The global set (id 0) and the sets given to init (ids from 1, in the order given).
void addStaticProcessSets(WorldLinks& links, const Topology& topology, const Settings& settings,
                          const std::vector<std::vector<int>>& sets, ProcessSetTable& table);

}  // namespace hora
