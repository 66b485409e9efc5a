#include "core/common/spin.h"

#include <sched.h>
#include <unistd.h>

#ifdef __linux__
#include <sys/prctl.h>
#endif

namespace hora {

int usableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

bool oversubscribed(int localRanks) {
  int cpus = usableCpus();
  return cpus == 0 || localRanks > cpus;
}

bool boundToOneCpu() { return usableCpus() == 1; }

bool callerDrivesByDefault(int localRanks) {
  long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  return online > 0 && localRanks <= 2 * online;
}

bool payloadsByDefault(int localRanks) { return callerDrivesByDefault(localRanks); }

void requestPreciseSleeps() {
#ifdef __linux__
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
}

}  // namespace hora
