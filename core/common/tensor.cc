#include "core/common/tensor.h"

#include <cstdlib>
#include <new>

namespace hora {

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

OutputTensor OutputTensor::allocate(DataType dtype, std::vector<int64_t> shape) {
  OutputTensor out;
  out.dtype = dtype;
  out.shape = std::move(shape);
  int64_t n = 1;
  for (int64_t d : out.shape) n *= d;
  size_t bytes = static_cast<size_t>(n) * dtypeSize(dtype);
  // aligned_alloc needs a size that is a multiple of the alignment, and never 0.
  size_t rounded = ((bytes + 63) / 64) * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) throw std::bad_alloc();
  out.storage =
      std::shared_ptr<uint8_t>(static_cast<uint8_t*>(p), [](uint8_t* q) { std::free(q); });
  return out;
}

}  // namespace hora
