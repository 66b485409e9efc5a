#pragma once
// Fault injection for chaos tests: cuts a connection after this process has sent a given number
// of bytes over sockets. Off unless HORA_FAULT_INJECT is set; production never sets it, and then
// the only cost is one relaxed atomic load per send.
//
// HORA_FAULT_INJECT="close_after_bytes=N[,rank=R]": the send that takes this process's total past
// N bytes (store, control and data connections alike) sends only up to N, then shuts that socket
// down in both directions and reports the connection closed, as a peer reset would. It fires once.
// With rank=R it is armed only in the process whose rank (HORA_RANK, OMPI_COMM_WORLD_RANK,
// PMI_RANK or RANK) is R. A malformed value is ignored with a warning.
//
// Thread safety: any thread may call beforeSend concurrently.
#include <cstddef>

namespace hora {
namespace net {

struct FaultDecision {
  size_t allowBytes;  // how many of the requested bytes to send
  bool cut;           // after sending allowBytes, shut the socket down and report it closed
};

// Called by sendSome before each send of `bytes` bytes (bytes > 0).
FaultDecision faultBeforeSend(size_t bytes);

}  // namespace net
}  // namespace hora
