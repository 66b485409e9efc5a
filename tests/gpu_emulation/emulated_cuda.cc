// Emulated CUDA runtime: the subset of libcudart's C API that Hora calls, with the real names and
// signatures. Device memory is host memory; a stream is a queue run by a worker thread; an event
// completes when the queue it was recorded on reaches it. Tests point HORA_CUDA_LIBRARY here.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

#include "tests/gpu_emulation/emulated_cuda.h"

namespace hora_emu {

struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> tasks;
  size_t running = 0;  // tasks taken but not finished
  bool closing = false;
  std::thread worker;

  Stream() : worker([this] { run(); }) {}
  ~Stream() {
    {
      std::lock_guard<std::mutex> lock(mu);
      closing = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
  }
  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      cv.wait(lock, [this] { return closing || !tasks.empty(); });
      if (tasks.empty()) return;
      auto task = std::move(tasks.front());
      tasks.pop_front();
      running = 1;
      lock.unlock();
      task();
      lock.lock();
      running = 0;
      cv.notify_all();
    }
  }
  void drain() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this] { return tasks.empty() && running == 0; });
  }
};

struct Event {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;   // records made (host side)
  uint64_t completed = 0;  // records the stream has reached
  bool destroyed = false;  // destroyed with a record pending: the last record frees it
};

namespace {

std::atomic<bool> gExiting{false};
std::atomic<int> gDevice{0};

Stream& defaultStream() {
  // Never destroyed: worker threads must not be joined from static destructors.
  static Stream* s = new Stream();
  return *s;
}

struct ExitFlag {
  ~ExitFlag() { gExiting = true; }
} gExitFlag;

int deviceCount() {
  const char* v = std::getenv("HORA_EMU_DEVICE_COUNT");
  return v != nullptr ? std::atoi(v) : 8;
}

}  // namespace

void enqueueTask(Stream* stream, std::function<void()> task) {
  Stream& s = stream != nullptr ? *stream : defaultStream();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.tasks.push_back(std::move(task));
  }
  s.cv.notify_all();
}

bool shuttingDown() { return gExiting.load(); }

}  // namespace hora_emu

using hora_emu::Event;
using hora_emu::Stream;

extern "C" {

typedef int cudaError_t;
typedef Stream* cudaStream_t;
typedef Event* cudaEvent_t;
typedef void (*cudaHostFn_t)(void*);

enum : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
  cudaErrorNotReady = 600,
};

cudaError_t cudaGetDeviceCount(int* count) {
  *count = hora_emu::deviceCount();
  return *count > 0 ? cudaSuccess : cudaErrorNoDevice;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= hora_emu::deviceCount()) return cudaErrorInvalidDevice;
  hora_emu::gDevice = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = hora_emu::gDevice;
  return cudaSuccess;
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorNotReady: return "device not ready";
    default: return "unknown error";
  }
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = std::malloc(bytes > 0 ? bytes : 1);
  return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

// kind is ignored: every pointer is a host pointer here.
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, int /*kind*/,
                            cudaStream_t stream) {
  hora_emu::enqueueTask(stream, [=] {
    if (bytes > 0) std::memmove(dst, src, bytes);
  });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  hora_emu::enqueueTask(stream, [=] {
    if (bytes > 0) std::memset(dst, value, bytes);
  });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int /*flags*/) {
  *stream = new Stream();
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return cudaErrorInvalidValue;
  // CUDA lets destroy return at once and finishes the work; joining the worker does the same.
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  (stream != nullptr ? *stream : hora_emu::defaultStream()).drain();
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int /*flags*/) {
  *event = new Event();
  return cudaSuccess;
}

// As in CUDA, an event may be destroyed while a record is pending; it is freed once reached.
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  {
    std::lock_guard<std::mutex> lock(event->mu);
    if (event->completed < event->recorded) {
      event->destroyed = true;
      return cudaSuccess;
    }
  }
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(event->mu);
    n = ++event->recorded;
  }
  hora_emu::enqueueTask(stream, [event, n] {
    bool free;
    {
      std::lock_guard<std::mutex> lock(event->mu);
      if (event->completed < n) event->completed = n;
      event->cv.notify_all();
      free = event->destroyed && event->completed >= event->recorded;
    }
    if (free) delete event;
  });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(event->mu);
  return event->completed >= event->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  std::unique_lock<std::mutex> lock(event->mu);
  uint64_t n = event->recorded;
  event->cv.wait(lock, [&] { return event->completed >= n; });
  return cudaSuccess;
}

// The stream's later tasks wait for the event's most recent record, as CUDA orders them.
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int /*flags*/) {
  uint64_t n;
  {
    std::lock_guard<std::mutex> lock(event->mu);
    n = event->recorded;
  }
  hora_emu::enqueueTask(stream, [event, n] {
    std::unique_lock<std::mutex> lock(event->mu);
    // Bounded steps so that a process exiting with a stuck producer does not hang here.
    while (event->completed < n && !hora_emu::shuttingDown()) {
      event->cv.wait_for(lock, std::chrono::milliseconds(50));
    }
  });
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* userData) {
  hora_emu::enqueueTask(stream, [fn, userData] { fn(userData); });
  return cudaSuccess;
}

// Test helper, not CUDA: after `delayMs` on the stream's worker, copy `bytes` from src to dst. It
// stands for a slow kernel that produces a tensor, so a consumer that does not order itself after
// the producer's stream reads stale data.
cudaError_t horaEmuDelayedCopy(void* dst, const void* src, size_t bytes, int delayMs,
                               cudaStream_t stream) {
  hora_emu::enqueueTask(stream, [=] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    std::memcpy(dst, src, bytes);
  });
  return cudaSuccess;
}

}  // extern "C"
