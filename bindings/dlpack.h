#pragma once
// Import of framework tensors through DLPack.
//
// Contract:
// - importTensor() accepts an object with __dlpack__ or a raw "dltensor" capsule, checks that the
//   tensor is usable by the engine (compact row-major, a supported dtype, a supported device) and
//   only then consumes the capsule (renames it "used_dltensor"). On a ValueError nothing is
//   consumed: the producer's capsule destructor still frees the tensor.
// - The returned DlpackTensor owns the DLManagedTensor: its destructor calls the producer's
//   deleter. Deleters of some producers (numpy) call into Python, so a DlpackTensor must be
//   destroyed with the GIL held.
// - exportTensor() goes the other way, for buffers the engine allocated.
// - All functions here need the GIL.
#include <pybind11/pybind11.h>

#include <memory>
#include <optional>
#include <string>

#include "core/common/tensor.h"
#include "third_party/dlpack/dlpack.h"

namespace hora::bindings {

class DlpackTensor {
 public:
  DlpackTensor(DLManagedTensor* managed, TensorView view)
      : managed_(managed), view_(std::move(view)) {}
  ~DlpackTensor();
  DlpackTensor(const DlpackTensor&) = delete;
  DlpackTensor& operator=(const DlpackTensor&) = delete;

  const TensorView& view() const { return view_; }

 private:
  DLManagedTensor* managed_;
  TensorView view_;
};

// dtypeOverride: a Hora dtype name ("bfloat16", "bool") for producers that cannot express the
// dtype in DLPack; it must have the same element size as the exported one.
// Throws hora::InvalidArgument (ValueError) for unusable tensors, TypeError for non-tensors.
std::unique_ptr<DlpackTensor> importTensor(pybind11::handle obj,
                                           const std::optional<std::string>& dtypeOverride);

// A DLPack capsule ("dltensor") of an engine buffer, host or device, zero-copy: the tensor made
// from it keeps the buffer alive, and a capsule nobody consumed frees its share when it dies.
pybind11::capsule exportTensor(const OutputTensor& out);

// "float32", "complex64", "int32x4": the DLPack dtype as users know it, for error messages.
std::string dlpackDtypeName(const DLDataType& dtype);

}  // namespace hora::bindings
