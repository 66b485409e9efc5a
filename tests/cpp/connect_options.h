#pragma once
// Test fixture: the options with which a test's ranks (threads of this process, see spawn.h)
// connect as one job over loopback. The bounds are far above what a test takes, so a wait that
// reaches one is a failure of the code under test, never of a slow machine.
//
//   ConnectOptions o = hora::test::loopbackOptions(rank, 2, "my-test");
//   o.shmWindowBytes = 256;  // then whatever the test varies
#include <chrono>
#include <string>

#include "core/transport/transport.h"

namespace hora {
namespace test {

inline ConnectOptions loopbackOptions(int rank, int size, const std::string& secret,
                                      Millis bound = std::chrono::milliseconds(10000)) {
  ConnectOptions o;
  o.rank = rank;
  o.size = size;
  o.secret = secret;
  o.listenHost = "127.0.0.1";
  o.startTimeout = bound;
  o.opTimeout = bound;
  return o;
}

}  // namespace test
}  // namespace hora
