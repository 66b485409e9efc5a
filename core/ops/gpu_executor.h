#pragma once
// GpuExecutor: runs responses whose tensors live on a CUDA device, through NCCL, stream-ordered.
//
// Per response: the engine's stream of the device waits on every input's ready event (recorded
// on the producer's stream order at enqueue, bindings/gpu_intake.h), the copies and collectives
// are enqueued on that stream (fused tensors through the device fusion buffer, or as one NCCL
// group), and a `done` event is recorded after them. The response's entries (inputs, handles)
// stay here until progress() sees `done` complete; only then are the handles completed, so a
// frontend that waits on a handle finds its result in place, readable from any stream, and the
// input's memory is never released while the device still uses it.
//
// Communicators: one per (process set, device), made the first time a set runs GPU work; set
// rank 0 puts a fresh NCCL unique id in the store, the others read it (for at most
// HORA_START_TIMEOUT; a failure of the store names who serves it and the rank awaited, as the
// rendezvous does, core/transport/rendezvous_store.h). Joining the communicator is bounded by
// HORA_START_TIMEOUT too where NCCL has non-blocking init (>= 2.14): past it, TimeoutError names
// this rank, the set (or host), its ranks and the device, and the job stops as below.
//
// Errors: progress() polls ncclCommGetAsyncError of every communicator with work pending; an
// error, or work older than HORA_TIMEOUT_SECONDS (a dead or hung peer), aborts that communicator
// and throws (IoError / TimeoutError naming this rank, the set's ranks and the tensors); the
// runtime then stops and failAll() fails every pending handle with that message.
//
// Hierarchical allreduce (the global set's allreduces when HORA_HIERARCHICAL_ALLREDUCE chose
// the hierarchical path, core/ops/gpu_hierarchical.cc): a second NCCL communicator per device
// joins the ranks of this rank's host; the slices cross hosts over the CPU communicator, staged
// through host memory after a bounded wait for the device.
//
// Background thread only.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/common/time.h"
#include "core/coordinator/tensor_queue.h"
#include "core/messages/messages.h"
#include "core/store/store.h"
#include "core/timeline/timeline.h"
#include "core/transport/nccl/communicator.h"
#include "core/transport/nccl/device_buffer.h"
#include "core/transport/transport.h"

namespace hora {

class HierarchicalCommunicator;

// Host memory the hierarchical allreduce stages slices through. Grows to the largest size asked
// for; a replaced allocation may still be read by a queued host-to-device copy, so it is kept
// until releaseRetired() (called when no work is pending).
class HostStagingBuffer {
 public:
  uint8_t* reserve(size_t bytes);
  void releaseRetired() { retired_.clear(); }

 private:
  std::vector<uint8_t> data_;
  std::vector<std::vector<uint8_t>> retired_;
};

class GpuExecutor {
 public:
  // `co`: as the world connected (this rank, and who serves the store).
  GpuExecutor(const gpu::GpuLibrary& lib, Store& store, const ConnectOptions& co, Millis timeout,
              Millis startTimeout);
  ~GpuExecutor();
  GpuExecutor(const GpuExecutor&) = delete;
  GpuExecutor& operator=(const GpuExecutor&) = delete;

  // Enqueues r's work. Takes the entries; a failure to enqueue completes their handles with the
  // error and rethrows it when the communicator is unusable. `hierarchy`, when given, is the
  // set's communicator whose hierarchical allreduce was chosen: an allreduce then runs
  // hierarchically (and blocks this thread, bounded by the timeout, for its cross-host step).
  void run(const Response& r, std::vector<std::unique_ptr<TensorEntry>> owned,
           const std::vector<int>& setRanks, Timeline* timeline,
           HierarchicalCommunicator* hierarchy = nullptr);
  // Completes the handles of finished work, in order. Throws as described above.
  void progress(Clock::time_point now);
  bool busy() const { return !pending_.empty(); }
  // Waits (polling, bounded by `deadline`) for pending work to finish.
  void drain(Clock::time_point deadline);
  // A removed process set's communicators go once no work is pending (its id may come back).
  void forgetProcessSet(int id);
  // Aborts every communicator and completes every pending handle with `error`.
  void failAll(std::exception_ptr error);

 private:
  struct DeviceState {
    gpu::cudaStream_t stream = nullptr;
    gpu::DeviceFusionBuffer fusion;
    HostStagingBuffer staging;
  };
  struct Work {
    std::vector<std::unique_ptr<TensorEntry>> entries;
    gpu::cudaEvent_t done = nullptr;
    gpu::NcclCommunicator* comm = nullptr;
    Clock::time_point deadline;
    std::string what;  // "ALLREDUCE of 'a', 'b' on GPU 0 (process set 0: ranks 0, 1)"
  };

  DeviceState& device(int ordinal);
  // The device of the tensors (the last one's), or for a rank holding none (joined) the device the
  // set `setKey` already uses; -1 when there is none.
  int deviceOf(const std::vector<std::unique_ptr<TensorEntry>>& owned, int setKey) const;
  gpu::NcclCommunicator& communicator(int setId, int ordinal, const std::vector<int>& setRanks);
  // The NCCL communicator of this rank's host on `ordinal` (ranks of the host in `hier`'s layout).
  gpu::NcclCommunicator& hostCommunicator(int ordinal, const HierarchicalCommunicator& hier);
  // The unique id under `storeKey`: made and published by the first member, read by the others
  // from `firstRank` (world rank); `what` is "process set 0 on GPU 1" for errors.
  gpu::ncclUniqueId uniqueId(const std::string& storeKey, bool first, int firstRank,
                             const std::string& what);
  // Joins the communicator of `id` (bounded by startTimeout_ where NCCL allows, see above);
  // each member marks its arrival under `storeKey`, and a timeout names the ranks never marked.
  std::unique_ptr<gpu::NcclCommunicator> join(const gpu::ncclUniqueId& id,
                                              const std::string& storeKey, int commRank,
                                              const std::vector<int>& ranks, int ordinal,
                                              const std::string& what);
  // Blocks until the device stream has run everything enqueued so far, polling the stream and
  // w.comm's async error until `deadline` (the response's waits share one: HORA_TIMEOUT_SECONDS
  // from its start); fails w's communicator past it.
  void waitForDevice(Work& w, gpu::cudaStream_t stream, const std::string& step,
                     Clock::time_point deadline);
  void finish(Work& w, std::exception_ptr error);
  [[noreturn]] void failComm(Work& w, const std::string& why, bool timeout);

  const gpu::GpuLibrary& lib_;
  Store& store_;
  const ConnectOptions co_;
  const int worldRank_;
  const Millis timeout_, startTimeout_;
  std::map<int, DeviceState> devices_;
  std::map<std::pair<int, int>, std::unique_ptr<gpu::NcclCommunicator>> comms_;
  std::map<int, int> commsMade_;  // per process set: unique ids taken from the store
  int hostCommsMade_ = 0;         // host communicators made (their unique ids' sequence)
  std::vector<Work> pending_;     // in enqueue order
  std::vector<std::unique_ptr<gpu::NcclCommunicator>> retired_;  // of removed sets
};

// Runs one response's collectives on the device (core/ops/gpu_ops.cc). Entries may be null for
// a joined rank (allreduce only). Outputs go into the handles; buffers that must outlive the
// call are kept by the caller until `done`.
struct GpuOpContext {
  const gpu::GpuLibrary& lib;
  gpu::NcclCommunicator& comm;
  gpu::DeviceFusionBuffer& fusion;
  const std::vector<int>& setRanks;
  std::vector<TensorEntry*> entries;
  int device;
};
void runGpuResponse(const Response& r, GpuOpContext& cx);
// Enqueues a copy of `bytes` (device or host memory, either way) on cx.comm's stream.
void copyOnStream(GpuOpContext& cx, void* dst, const void* src, size_t bytes);
void zeroOnStream(GpuOpContext& cx, void* dst, size_t bytes);
// Copies the response's tensors one after another into `buf` (zeros for a joined rank's part) and
// returns the bytes written; unpackTensors() copies each tensor's part back.
size_t packTensors(const Response& r, GpuOpContext& cx, uint8_t* buf);
void unpackTensors(const Response& r, GpuOpContext& cx, const uint8_t* buf);

// What the hierarchical allreduce needs besides the host's NCCL communicator (cx.comm): the
// cross-host CPU communicator, host staging memory, the set's size (Average), a bounded wait for
// the device stream (given what it waits for, for the error), and `step`, which marks the start
// of each step on the timeline.
struct GpuHierarchy {
  Communicator& cross;
  HostStagingBuffer& staging;
  int setSize;
  std::function<void(const std::string&)> waitForDevice;
  std::function<void(const std::string&)> step;
};
void runGpuHierarchicalAllreduce(const Response& r, GpuOpContext& cx, GpuHierarchy& h);

// "NCCL_ALLREDUCE": the timeline activity of a GPU collective.
std::string collectiveActivity(const gpu::NcclCommunicator& comm, OpKind kind);

}  // namespace hora
