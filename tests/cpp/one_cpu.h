#pragma once
// Runs a function with the calling thread bound to one of the CPUs it may use, then restores
// its affinity: what a rank bound by horarun sees.
#include <gtest/gtest.h>
#include <sched.h>

#include "core/common/spin.h"

namespace hora {

template <typename F>
auto onOneCpu(F&& f) {
  cpu_set_t saved;
  EXPECT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  EXPECT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  auto result = f();
  EXPECT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  return result;
}

}  // namespace hora
