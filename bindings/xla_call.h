#pragma once
// XlaCall: one XLA FFI call frame (third_party/xla_ffi/xla_ffi.h) as the handlers of
// jax_ffi.cc read it: attributes by name, argument and result buffers, and errors made through
// XLA's own API table. Framework-free: nothing of XLA or JAX is linked; XLA passes its API
// table in every call frame.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/common/dtype.h"
#include "third_party/xla_ffi/xla_ffi.h"

namespace hora::bindings {

class XlaCall {
 public:
  // InvalidArgument when the frame is older than the layout Hora reads or in another stage than
  // execution.
  explicit XlaCall(XLA_FFI_CallFrame* frame);

  // Attributes by name; InvalidArgument when missing or of another type.
  int64_t intAttr(std::string_view name) const;
  double floatAttr(std::string_view name) const;  // f32 or f64
  std::string_view stringAttr(std::string_view name) const;

  size_t argCount() const { return static_cast<size_t>(frame_->args.size); }
  size_t retCount() const { return static_cast<size_t>(frame_->rets.size); }
  const XLA_FFI_Buffer& arg(size_t i) const;
  const XLA_FFI_Buffer& ret(size_t i) const;

 private:
  const void* attr(std::string_view name, XLA_FFI_AttrType type) const;

  XLA_FFI_CallFrame* frame_;
};

// True when XLA asks for the handler's metadata (before the first execution) rather than for
// a run: the answer (the API version these handlers are written against) is then filled in.
bool answerMetadataQuery(XLA_FFI_CallFrame* frame);

// An error XLA reports to the caller (a jax.errors.JaxRuntimeError in Python), made by XLA's API.
XLA_FFI_Error* xlaError(const XLA_FFI_CallFrame* frame, XLA_FFI_Error_Code code,
                        const std::string& message);

// Hora's element type of an XLA buffer; InvalidArgument for types the engine does not carry.
DataType hostDataType(XLA_FFI_DataType type);
size_t byteSize(const XLA_FFI_Buffer& buffer);
std::vector<int64_t> shapeOf(const XLA_FFI_Buffer& buffer);

}  // namespace hora::bindings
