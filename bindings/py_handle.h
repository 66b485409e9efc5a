#pragma once
// PyHandle: what Python sees of one enqueued operation (hora._core.Handle).
//
// Contract:
// - Owns the imported input tensor (DlpackTensor) until the engine is done with it. If Python
//   drops the wrapper while the operation still runs, the (engine handle, input) pair moves to a
//   process-wide deferred list that sweepDeferredReleases() empties as operations finish; it is
//   swept on every enqueue, wait and shutdown.
// - A handle of a call that works on a copy (submit's `copy`) holds that copy instead, which the
//   engine reads and writes, until the operation finished.
// - Every member function needs the GIL (wait() releases it while blocking).
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <vector>

#include "bindings/dlpack.h"
#include "core/coordinator/handle.h"
#include "core/runtime.h"

namespace hora::bindings {

class PyHandle {
 public:
  PyHandle(std::shared_ptr<Handle> handle, std::unique_ptr<DlpackTensor> input,
           std::shared_ptr<uint8_t> copy = nullptr)
      : handle_(std::move(handle)), input_(std::move(input)), copy_(std::move(copy)) {}
  ~PyHandle();
  PyHandle(const PyHandle&) = delete;
  PyHandle& operator=(const PyHandle&) = delete;

  bool poll();
  // True when done (raising the operation's error, if any); false when the timeout passed first.
  bool wait(std::optional<double> timeoutSeconds);
  // For a blocking submission (submit's `waits`): waits without a timeout and releases the input,
  // leaving the operation's error, if any, to raiseIfFailed(). Every error the engine delivers
  // through a handle is already of the class hora.common.ops.engine_error would make of it.
  // runtime: the running one, which the caller holds (null: looked up).
  void finish(Runtime* runtime);
  void raiseIfFailed() { handle_->rethrowIfFailed(); }
  pybind11::object output();
  std::vector<int32_t> receivedSplits();
  int lastJoinedRank();

 private:
  void requireSuccess(const char* what);
  void releaseInputIfDone();

  std::shared_ptr<Handle> handle_;
  std::unique_ptr<DlpackTensor> input_;
  std::shared_ptr<uint8_t> copy_;  // the buffer of a call on a copy; else null
};

// Releases the inputs of dropped handles whose operations have finished. GIL held.
void sweepDeferredReleases();

// The running Runtime, or null (register_runtime.cc). GIL held or not.
std::shared_ptr<Runtime> currentRuntime();
// The running Runtime; ValueError (InvalidArgument) "not initialized" without one.
std::shared_ptr<Runtime> requireRuntime();

// Marks the calling thread as blocked in a wait (Runtime::waitBegin/waitEnd) for its lifetime;
// driven: on a handle it may drive (Handle::driven()). The caller keeps `runtime` alive.
class BlockedScope {
 public:
  BlockedScope(Runtime* runtime, bool driven) : runtime_(runtime) {
    if (runtime_) runtime_->waitBegin(driven);
  }
  ~BlockedScope() {
    if (runtime_) runtime_->waitEnd();
  }
  BlockedScope(const BlockedScope&) = delete;
  BlockedScope& operator=(const BlockedScope&) = delete;

 private:
  Runtime* runtime_;
};

// Waits for `handle` in slices of at most kSignalCheckInterval with the GIL released, running
// Python's signal handlers between slices (a KeyboardInterrupt or an alarm's exception propagates
// within one slice). Without a timeout the thread counts as blocked for deadlock detection.
// True when done; false when `timeoutSeconds` passed first. GIL held on entry. runtime: the
// running one when the caller holds it (null: looked up when the wait counts as blocked).
bool waitInterruptibly(const Handle& handle, std::optional<double> timeoutSeconds,
                       Runtime* runtime = nullptr);

}  // namespace hora::bindings
