#pragma once
// Test helper: whether the peer of a connected socket closed it, for tests of servers that drop
// connections (strangers, handshake timeouts).
#include <poll.h>

#include "core/common/time.h"
#include "core/net/socket.h"

namespace hora {
namespace test {

// True once the peer closed fd (reads return end of file or an error), waiting up to `bound`;
// bytes that arrive first are read and dropped. The bound is generous, not a timing claim.
inline bool peerClosedWithin(int fd, Millis bound) {
  char buf[256];
  auto deadline = Clock::now() + bound;
  while (net::waitFor(fd, POLLIN, deadline)) {
    net::IoResult r = net::recvSome(fd, buf, sizeof(buf));
    if (r.status == net::IoStatus::Closed || r.status == net::IoStatus::Failed) return true;
  }
  return false;
}

}  // namespace test
}  // namespace hora
