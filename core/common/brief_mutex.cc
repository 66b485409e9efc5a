#include "core/common/brief_mutex.h"

#include <sched.h>

namespace hora {
namespace {

bool mayRunOnSeveralCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return false;
  return CPU_COUNT(&set) > 1;
}

}  // namespace

BriefMutex::BriefMutex() {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
  spins_ = mayRunOnSeveralCpus();
  if (spins_) pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
  pthread_mutex_init(&mu_, &attr);
  pthread_mutexattr_destroy(&attr);
}

}  // namespace hora
