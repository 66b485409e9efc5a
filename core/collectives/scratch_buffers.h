#pragma once
// The scratch space a Links implementation hands to algorithms (Links::scratch): two byte
// buffers that each keep the largest size asked of them, so a steady stream of collectives
// allocates nothing. Single-threaded, like the links that own them.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/common/errors.h"

namespace hora {
namespace collectives {

class ScratchBuffers {
 public:
  // At least `bytes` bytes of slot 0 or 1; earlier contents are not kept when it grows.
  uint8_t* get(int slot, size_t bytes) {
    HORA_CHECK(slot >= 0 && slot < 2, "bad scratch slot");
    Buffer& b = slots_[slot];
    if (b.capacity < bytes) {
      size_t cap = std::max(bytes, b.capacity + b.capacity / 2);
      b.data.reset(new uint8_t[cap]);
      b.capacity = cap;
    }
    return b.data.get();
  }

 private:
  struct Buffer {
    std::unique_ptr<uint8_t[]> data;
    size_t capacity = 0;
  };
  Buffer slots_[2];
};

}  // namespace collectives
}  // namespace hora
