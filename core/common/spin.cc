#include "core/common/spin.h"

#ifdef __linux__
#include <sys/prctl.h>
#endif

namespace hora {

void requestPreciseSleeps() {
#ifdef __linux__
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
}

}  // namespace hora
