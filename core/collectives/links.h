#pragma once
// Links: the transport-neutral point-to-point layer every algorithm in core/collectives/ is written
// against. It offers non-blocking byte pipes between the members of one group (ranks 0..size()-1
// of a Communicator) and one way to block until some pipe can move. Nothing here knows how bytes
// travel: a transport implements Links (TCP over sockets in core/transport/tcp/links.h; shared
// memory over ring buffers) and gets every algorithm without changing this folder.
//
// Contract:
// - Byte streams: per (peer, direction) bytes arrive in the order sent, with no framing. Every
//   member runs the same algorithms in the same order, which keeps the streams aligned.
// - trySend/tryRecv never block and may move fewer bytes than asked (0 when the pipe is full or
//   empty). A closed or failed pipe throws IoError naming both ranks.
// - waitAny blocks until at least one listed direction can move (or has failed), and throws
//   TimeoutError naming the silent peers when none could for the op timeout. Algorithms call it
//   only after a round in which nothing moved, so a wait never spins and a collective that keeps
//   making progress never times out.
// - scratch(slot, n) returns at least n bytes of reusable memory owned by the Links, valid until
//   the next scratch call for the same slot. Slots keep independent buffers.
// - Single-threaded: one collective at a time.
#include <cstddef>
#include <cstdint>

namespace hora {
namespace collectives {

class Links {
 public:
  struct Want {
    int peer;
    bool send;
    bool recv;
  };

  virtual ~Links() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual size_t trySend(int peer, const void* data, size_t bytes) = 0;
  virtual size_t tryRecv(int peer, void* data, size_t bytes) = 0;
  virtual void waitAny(const Want* wants, size_t count) = 0;
  virtual uint8_t* scratch(int slot, size_t bytes) = 0;
};

// Scratch slots used by the algorithms.
constexpr int kScratchRecv = 0;  // staging for received data about to be reduced
constexpr int kScratchWork = 1;  // a working copy (reduce-scatter of a const input)

}  // namespace collectives
}  // namespace hora
