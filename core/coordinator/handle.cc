#include "core/coordinator/handle.h"

#include <algorithm>

#include "core/common/spin.h"

namespace hora {

// finished_ is stored (release) after the results and done_, so it answers as the lock would,
// without the lock: a blocking call polls its handle twice.
bool Handle::poll() const { return finished_.load(std::memory_order_acquire); }

bool Handle::wait(std::optional<Millis> timeout) const {
  auto finished = [this] { return finished_.load(std::memory_order_acquire); };
  if (!finished()) {
    Micros budget = adaptive_ ? adaptive_->budget() : spin_;
    if (timeout) budget = std::min<Micros>(budget, *timeout);
    if (driver_) driver_->arrive();
    bool hit = spinUntil(budget, [&] {
      if (finished()) return true;
      return driver_ && driver_->tryDrive() && finished();
    });
    if (driver_) driver_->depart(hit);
    if (adaptive_ && budget.count() > 0) adaptive_->record(hit);
  }
  if (finished()) return true;  // done_ is set: no need to take the lock
  std::unique_lock<std::mutex> lock(mu_);
  if (!timeout) {
    cv_.wait(lock, [this] { return done_; });
    return true;
  }
  return cv_.wait_for(lock, *timeout, [this] { return done_; });
}

std::exception_ptr Handle::error() const {
  // error_ is written before finished_ (release) and never after it.
  if (finished_.load(std::memory_order_acquire)) return error_;
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void Handle::rethrowIfFailed() const {
  auto e = error();
  if (e) std::rethrow_exception(e);
}

void Handle::complete(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (done_) return;
    error_ = error;
    done_ = true;
    finished_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

}  // namespace hora
