#pragma once
// BriefMutex: a mutex for critical sections of a few hundred nanoseconds that two busy threads
// take in turns (a frontend thread submitting, the background thread taking). std::mutex sleeps
// at once when it finds the lock held, and then each side pays a futex wait and a wake-up,
// microseconds, for a section held for less than one. A BriefMutex made in a thread that may
// run on more than one CPU spins a bounded while first (glibc's adaptive mutex: at most its
// tunable count, 100 tries by default): only there can the holder run meanwhile and let go.
// Made in a thread bound to one CPU (horarun's binding, two ranks per CPU) it is a plain mutex,
// as a spin would only wait for a holder that cannot run.
//
// A Lockable: std::lock_guard and std::unique_lock take it.
#include <pthread.h>

namespace hora {

class BriefMutex {
 public:
  BriefMutex();
  ~BriefMutex() { pthread_mutex_destroy(&mu_); }
  BriefMutex(const BriefMutex&) = delete;
  BriefMutex& operator=(const BriefMutex&) = delete;

  void lock() { pthread_mutex_lock(&mu_); }
  bool try_lock() { return pthread_mutex_trylock(&mu_) == 0; }
  void unlock() { pthread_mutex_unlock(&mu_); }

  // Whether a thread that finds it held spins before it sleeps.
  bool spins() const { return spins_; }

 private:
  pthread_mutex_t mu_;
  bool spins_ = false;
};

}  // namespace hora
