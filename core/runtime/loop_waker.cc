#include "core/runtime/loop_waker.h"

namespace hora {

void LoopWaker::open(ControlChannel* channel) {
  std::lock_guard<std::mutex> lock(mu_);
  channel_ = channel;
  running_ = true;
}

void LoopWaker::wake() {
  // Counted before coalescing: whether a wake-up finds another still pending depends on how the
  // threads interleave, whether one was asked for does not.
  asked_.fetch_add(1, std::memory_order_relaxed);
  if (pending_.exchange(true, std::memory_order_acq_rel)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (parked_) unpark_.notify_one();
  if (!running_ || channel_ == nullptr) return;
  channel_->wakeup();
}

void LoopWaker::park(Millis timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  parked_ = true;
  unpark_.wait_for(lock, timeout, [this] { return pending_.load(std::memory_order_acquire); });
  parked_ = false;
}

void LoopWaker::close(const std::function<void()>& release) {
  std::lock_guard<std::mutex> lock(mu_);
  running_ = false;
  channel_ = nullptr;
  release();
}

bool LoopWaker::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

}  // namespace hora
