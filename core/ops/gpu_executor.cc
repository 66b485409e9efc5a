#include "core/ops/gpu_executor.h"

#include <thread>

#include "core/common/errors.h"
#include "core/common/logging.h"
#include "core/transport/hierarchical_communicator.h"
#include "core/transport/rendezvous_store.h"

namespace hora {
namespace {

// The key comms_ files host communicators under (process set ids are never negative).
constexpr int kHostSet = -1;

std::string describe(const Response& r, int device, const std::vector<int>& setRanks) {
  std::string names;
  for (size_t i = 0; i < r.names.size() && i < 4; ++i) {
    names += (i ? ", '" : "'") + r.names[i] + "'";
  }
  if (r.names.size() > 4) names += " and " + std::to_string(r.names.size() - 4) + " more";
  return std::string(opKindName(r.kind)) + " of " + names + " on GPU " + std::to_string(device) +
         " (process set " + std::to_string(r.processSetId) + ": ranks " + rankList(setRanks) + ")";
}

const char* initKind(const gpu::NcclCommunicator& comm) {
  return comm.nonblocking() ? "non-blocking init" : "blocking init";
}

}  // namespace

uint8_t* HostStagingBuffer::reserve(size_t bytes) {
  if (bytes > data_.size()) {
    retired_.push_back(std::move(data_));
    data_ = std::vector<uint8_t>(bytes);
  }
  return data_.data();
}

GpuExecutor::GpuExecutor(const gpu::GpuLibrary& lib, Store& store, const ConnectOptions& co,
                         Millis timeout, Millis startTimeout)
    : lib_(lib),
      store_(store),
      co_(co),
      worldRank_(co.rank),
      timeout_(timeout),
      startTimeout_(startTimeout) {}

GpuExecutor::~GpuExecutor() {
  failAll(std::make_exception_ptr(ShutdownError("Hora shut down with GPU work pending")));
  for (auto& [ordinal, d] : devices_) {
    lib_.cuda().setDevice(ordinal);
    lib_.cuda().streamDestroy(d.stream);
  }
}

GpuExecutor::DeviceState& GpuExecutor::device(int ordinal) {
  auto it = devices_.find(ordinal);
  if (it != devices_.end()) return it->second;
  DeviceState& d = devices_[ordinal];
  gpu::checkCuda(lib_.cuda().setDevice(ordinal), "cudaSetDevice");
  gpu::checkCuda(lib_.cuda().streamCreateWithFlags(&d.stream, gpu::kStreamNonBlocking),
                 "cudaStreamCreateWithFlags");
  return d;
}

gpu::NcclCommunicator& GpuExecutor::communicator(int setId, int ordinal,
                                                 const std::vector<int>& setRanks) {
  auto key = std::make_pair(setId, ordinal);
  auto it = comms_.find(key);
  if (it != comms_.end()) return *it->second;
  int setRank = -1;
  for (size_t i = 0; i < setRanks.size(); ++i) {
    if (setRanks[i] == worldRank_) setRank = static_cast<int>(i);
  }
  HORA_CHECK(setRank >= 0, "GPU work for a process set this rank is not in");
  // Every member makes its communicators of a set in the same order (responses are ordered), so
  // the n-th id of a set names the same communicator everywhere.
  std::string storeKey =
      "nccl/set" + std::to_string(setId) + "/id" + std::to_string(commsMade_[setId]++);
  const std::string what =
      "process set " + std::to_string(setId) + " on GPU " + std::to_string(ordinal);
  gpu::ncclUniqueId id = uniqueId(storeKey, setRank == 0, setRanks.front(), what);
  auto comm = join(id, storeKey, setRank, setRanks, ordinal, what);
  HORA_LOG(Debug, "NCCL communicator for " << what << " (rank " << setRank << " of "
                                           << setRanks.size() << ", " << initKind(*comm) << ")");
  return *(comms_[key] = std::move(comm));
}

// The first member makes a fresh id and puts it in the store under `storeKey`; the others read it.
// Store failures and a missing id name the store's owner and the awaited rank.
gpu::ncclUniqueId GpuExecutor::uniqueId(const std::string& storeKey, bool first, int firstRank,
                                        const std::string& what) {
  gpu::ncclUniqueId id{};
  const std::string purpose = "publish the NCCL unique id of " + what;
  if (first) {
    gpu::checkNccl(lib_.nccl().getUniqueId(&id), "ncclGetUniqueId");
    storeCall(co_, "publishing the NCCL unique id of " + what,
              [&] { store_.set(storeKey, std::string(id.internal, sizeof(id.internal))); });
    return id;
  }
  ConnectOptions o = co_;
  o.startTimeout = startTimeout_;
  std::string bytes = awaitRanks(
                          o, store_, {firstRank}, [&](int) { return storeKey; },
                          Clock::now() + startTimeout_, purpose)
                          .front();
  HORA_CHECK(bytes.size() == sizeof(id.internal), "NCCL unique id of the wrong size");
  std::copy(bytes.begin(), bytes.end(), id.internal);
  return id;
}

std::unique_ptr<gpu::NcclCommunicator> GpuExecutor::join(const gpu::ncclUniqueId& id,
                                                         const std::string& storeKey, int commRank,
                                                         const std::vector<int>& ranks, int ordinal,
                                                         const std::string& what) {
  DeviceState& d = device(ordinal);
  const std::string who = "rank " + std::to_string(worldRank_) + ": NCCL communicator for " + what +
                          " (ranks " + rankList(ranks) + ")";
  // Each member marks that its init is under way, so that a timeout can name those that never
  // began (dead before it, or elsewhere); one that began and hangs inside NCCL cannot be told.
  auto startedKey = [&](int rank) { return storeKey + "/started" + std::to_string(rank); };
  auto started = [&] {
    storeCall(co_, "joining the NCCL communicator for " + what,
              [&] { store_.set(startedKey(worldRank_), "1"); });
  };
  try {
    return std::make_unique<gpu::NcclCommunicator>(lib_, id, commRank,
                                                   static_cast<int>(ranks.size()), ordinal,
                                                   d.stream, startTimeout_, who, started);
  } catch (const TimeoutError& e) {
    std::vector<int> absent;
    try {
      for (int r : ranks) {
        if (!store_.check({startedKey(r)})) absent.push_back(r);
      }
    } catch (const Error&) {
      throw e;  // the store is gone too: the timeout alone says what happened
    }
    if (absent.empty()) throw;
    throw TimeoutError(std::string(e.what()) + "; never began to join: rank(s) " +
                       rankList(absent));
  }
}

gpu::NcclCommunicator& GpuExecutor::hostCommunicator(int ordinal,
                                                     const HierarchicalCommunicator& hier) {
  auto key = std::make_pair(kHostSet, ordinal);
  auto it = comms_.find(key);
  if (it != comms_.end()) return *it->second;
  const collectives::HostLayout& l = hier.layout();
  const std::vector<int>& hostRanks = l.hosts[l.host];
  // The ranks of a host make their host communicators in the same order (responses are
  // ordered), so the n-th id of a host names the same communicator on each of them.
  std::string storeKey =
      "nccl/host" + std::to_string(l.host) + "/id" + std::to_string(hostCommsMade_++);
  const std::string what = "host " + std::to_string(l.host) + " on GPU " + std::to_string(ordinal);
  gpu::ncclUniqueId id = uniqueId(storeKey, l.index == 0, hostRanks.front(), what);
  auto comm = join(id, storeKey, l.index, hostRanks, ordinal, what);
  HORA_LOG(Debug, "NCCL communicator for " << what << " (ranks " << rankList(hostRanks) << ", "
                                           << initKind(*comm) << ")");
  return *(comms_[key] = std::move(comm));
}

void GpuExecutor::waitForDevice(Work& w, gpu::cudaStream_t stream, const std::string& step,
                                Clock::time_point deadline) {
  gpu::cudaEvent_t reached = nullptr;
  gpu::checkCuda(lib_.cuda().eventCreateWithFlags(&reached, gpu::kEventDisableTiming),
                 "cudaEventCreateWithFlags");
  struct Release {
    const gpu::GpuLibrary& lib;
    gpu::cudaEvent_t ev;
    ~Release() { lib.cuda().eventDestroy(ev); }
  } release{lib_, reached};
  gpu::checkCuda(lib_.cuda().eventRecord(reached, stream), "cudaEventRecord");
  auto pause = std::chrono::microseconds(50);
  for (;;) {
    gpu::ncclResult_t e = w.comm->asyncError();
    if (e != gpu::ncclSuccess && e != gpu::ncclInProgress) {
      failComm(w,
               std::string("NCCL reported '") + lib_.nccl().getErrorString(e) + "' (error " +
                   std::to_string(e) + ") in " + step,
               false);
    }
    gpu::cudaError_t q = lib_.cuda().eventQuery(reached);
    if (q == gpu::cudaSuccess) return;
    if (q != gpu::cudaErrorNotReady) gpu::checkCuda(q, "cudaEventQuery");
    if (Clock::now() >= deadline) {
      failComm(w,
               step + " did not complete within HORA_TIMEOUT_SECONDS (" +
                   std::to_string(timeout_.count() / 1000) +
                   " s): a rank of this host is dead or hung",
               true);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

int GpuExecutor::deviceOf(const std::vector<std::unique_ptr<TensorEntry>>& owned,
                          int setKey) const {
  int ordinal = -1;
  for (const auto& e : owned) {
    if (e) ordinal = e->tensor.device.index;
  }
  if (ordinal >= 0) return ordinal;
  // A joined rank holds no tensor: it contributes on the device its set already uses.
  for (const auto& [key, comm] : comms_) {
    if (key.first == setKey) ordinal = key.second;
  }
  return ordinal;
}

void GpuExecutor::run(const Response& r, std::vector<std::unique_ptr<TensorEntry>> owned,
                      const std::vector<int>& setRanks, Timeline* timeline,
                      HierarchicalCommunicator* hierarchy) {
  const bool hierarchical = hierarchy != nullptr && r.kind == OpKind::Allreduce;
  const int ordinal = deviceOf(owned, hierarchical ? kHostSet : r.processSetId);
  Work w;
  w.entries = std::move(owned);
  w.what = describe(r, ordinal, setRanks);
  if (hierarchical) {
    const collectives::HostLayout& l = hierarchy->layout();
    w.what += ", hierarchical: NCCL among this host's ranks " + rankList(l.hosts[l.host]) + ", " +
              hierarchy->cross().backendName() + " across hosts";
  }
  try {
    if (ordinal < 0) {
      throw NotSupported("join with GPU tensors before this process set ran any GPU operation");
    }
    gpu::checkCuda(lib_.cuda().setDevice(ordinal), "cudaSetDevice");
    gpu::NcclCommunicator& comm = hierarchical ? hostCommunicator(ordinal, *hierarchy)
                                               : communicator(r.processSetId, ordinal, setRanks);
    DeviceState& d = device(ordinal);
    w.comm = &comm;
    // No copy or collective may read an input before its producer finished writing it.
    for (auto& e : w.entries) {
      if (e && e->tensor.readyEvent != nullptr) {
        gpu::checkCuda(lib_.cuda().streamWaitEvent(d.stream, e->tensor.readyEvent, 0),
                       "cudaStreamWaitEvent");
      }
    }
    GpuOpContext cx{lib_, comm, d.fusion, setRanks, {}, ordinal};
    for (auto& e : w.entries) cx.entries.push_back(e.get());
    const bool recording = timeline != nullptr && timeline->enabled();
    bool open = false;  // an activity of r's tensors is on the timeline
    auto step = [&](const std::string& activity) {
      if (!recording) return;
      for (const auto& name : r.names) {
        if (open) timeline->activityEnd(r.processSetId, name);
        timeline->activityStart(r.processSetId, name, activity);
      }
      open = true;
    };
    if (hierarchical) {
      GpuHierarchy h{hierarchy->cross(), d.staging, static_cast<int>(setRanks.size()),
                     [&, until = Clock::now() + timeout_](const std::string& what) {
                       waitForDevice(w, d.stream, what, until);
                     },
                     step};
      runGpuHierarchicalAllreduce(r, cx, h);
    } else {
      step(collectiveActivity(comm, r.kind));
      runGpuResponse(r, cx);
    }
    if (open) {
      for (const auto& name : r.names) timeline->activityEnd(r.processSetId, name);
    }
    gpu::checkCuda(lib_.cuda().eventCreateWithFlags(&w.done, gpu::kEventDisableTiming),
                   "cudaEventCreateWithFlags");
    gpu::checkCuda(lib_.cuda().eventRecord(w.done, d.stream), "cudaEventRecord");
  } catch (const InvalidArgument& e) {
    // A refusal after negotiation, as on the CPU path (executor.cc).
    finish(w, std::make_exception_ptr(InvalidCollectiveError(e.what())));
    return;
  } catch (const NotSupported&) {
    finish(w, std::current_exception());
    return;
  } catch (...) {
    finish(w, std::current_exception());
    throw;
  }
  w.deadline = Clock::now() + timeout_;
  pending_.push_back(std::move(w));
}

std::string collectiveActivity(const gpu::NcclCommunicator&, OpKind kind) {
  return std::string("NCCL_") + opKindName(kind);
}

void GpuExecutor::finish(Work& w, std::exception_ptr error) {
  for (auto& e : w.entries) {
    if (!e) continue;
    if (e->tensor.readyEvent != nullptr) lib_.cuda().eventDestroy(e->tensor.readyEvent);
    e->tensor.readyEvent = nullptr;
    e->handle->complete(error);
  }
  w.entries.clear();
  if (w.done != nullptr) lib_.cuda().eventDestroy(w.done);
  w.done = nullptr;
}

void GpuExecutor::failComm(Work& w, const std::string& why, bool timeout) {
  std::string message = "rank " + std::to_string(worldRank_) + ": " + why + " while running " +
                        w.what + "; the NCCL communicator was aborted";
  HORA_LOG(Error, message);
  if (w.comm != nullptr) w.comm->abort();
  if (timeout) throw TimeoutError(message);
  throw IoError(message);
}

void GpuExecutor::progress(Clock::time_point now) {
  size_t finished = 0;
  for (Work& w : pending_) {
    // The error first: work that failed on the device may still reach its done event.
    gpu::ncclResult_t e = w.comm->asyncError();
    if (e != gpu::ncclSuccess && e != gpu::ncclInProgress) {
      failComm(w,
               std::string("NCCL reported '") + lib_.nccl().getErrorString(e) + "' (error " +
                   std::to_string(e) + ")",
               false);
    }
    gpu::cudaError_t q = lib_.cuda().eventQuery(w.done);
    if (q == gpu::cudaSuccess) {
      finish(w, nullptr);
      ++finished;
      continue;
    }
    if (q != gpu::cudaErrorNotReady) gpu::checkCuda(q, "cudaEventQuery");
    if (now >= w.deadline) {
      failComm(w,
               "the collective did not complete within HORA_TIMEOUT_SECONDS (" +
                   std::to_string(timeout_.count() / 1000) +
                   " s): a peer of the set is dead or hung",
               true);
    }
    break;  // later work on the same stream cannot be done before this
  }
  pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(finished));
  if (pending_.empty()) {
    for (auto& [ordinal, d] : devices_) {
      d.fusion.releaseRetired();
      d.staging.releaseRetired();
    }
    retired_.clear();
  }
}

void GpuExecutor::forgetProcessSet(int id) {
  for (auto it = comms_.begin(); it != comms_.end();) {
    if (it->first.first == id) {
      retired_.push_back(std::move(it->second));
      it = comms_.erase(it);
    } else {
      ++it;
    }
  }
  if (pending_.empty()) retired_.clear();
}

void GpuExecutor::drain(Clock::time_point deadline) {
  auto pause = std::chrono::microseconds(50);
  while (busy() && Clock::now() < deadline) {
    progress(Clock::now());
    if (!busy()) return;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

void GpuExecutor::failAll(std::exception_ptr error) {
  // Abort first: the streams leave the NCCL work, and nothing reads the inputs any more.
  for (auto& [key, comm] : comms_) comm->abort();
  for (auto& [ordinal, d] : devices_) {
    lib_.cuda().setDevice(ordinal);
    lib_.cuda().streamSynchronize(d.stream);
  }
  for (Work& w : pending_) finish(w, error);
  pending_.clear();
  comms_.clear();
  retired_.clear();
}

}  // namespace hora
