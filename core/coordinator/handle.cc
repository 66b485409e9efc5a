#include "core/coordinator/handle.h"

#include <algorithm>

#include "core/common/spin.h"

namespace hora {

// finished_ is stored (release) after the results and the error, so no lock is needed to read
// it: a blocking call polls its handle twice.
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
  if (finished()) return true;
  std::unique_lock<std::mutex> lock(mu_);
  if (!timeout) {
    cv_.wait(lock, finished);
    return true;
  }
  return cv_.wait_for(lock, *timeout, finished);
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
    if (finished_.load(std::memory_order_relaxed)) return;
    error_ = error;
    finished_.store(true, std::memory_order_release);
  }
  cv_.notify_all();
}

}  // namespace hora
