#include "core/fusion/fusion_buffer.h"

#include <cstdlib>
#include <new>

namespace hora {

void FusionBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

uint8_t* FusionBuffer::reserve(size_t bytes) {
  if (bytes <= capacity_ && data_) return data_.get();
  // Grow by at least 1.5x so a slowly growing demand does not reallocate every step.
  size_t want = bytes > capacity_ + capacity_ / 2 ? bytes : capacity_ + capacity_ / 2;
  want = ((want + 63) / 64) * 64;
  if (want == 0) want = 64;
  void* p = std::aligned_alloc(64, want);
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(static_cast<uint8_t*>(p));
  capacity_ = want;
  return data_.get();
}

}  // namespace hora
