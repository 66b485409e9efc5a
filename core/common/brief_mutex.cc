#include "core/common/brief_mutex.h"

#include "core/common/spin.h"

namespace hora {

BriefMutex::BriefMutex() {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
#ifdef PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP
  spins_ = !boundToOneCpu();
  if (spins_) pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
  pthread_mutex_init(&mu_, &attr);
  pthread_mutexattr_destroy(&attr);
}

}  // namespace hora
