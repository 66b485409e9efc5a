#pragma once
// FusionBuffer: the persistent host buffer fused tensors are packed into. It grows to the largest
// size ever asked for and is reused every step, so the steady state allocates nothing.
// Background thread only.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace hora {

class FusionBuffer {
 public:
  // At least `bytes` bytes, 64-byte aligned; contents are not preserved across calls.
  uint8_t* reserve(size_t bytes);
  size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t capacity_ = 0;
};

}  // namespace hora
