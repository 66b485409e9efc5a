#include "bindings/xla_call.h"

#include <cstring>

#include "core/common/errors.h"

namespace hora::bindings {
namespace {

// The size a struct has up to and including `field`: what a caller that knows the field sets
// struct_size to at least.
#define HORA_SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type*)nullptr)->field))

constexpr size_t kCallFrameSize = HORA_SIZE_THROUGH(XLA_FFI_CallFrame, attrs);
constexpr size_t kBufferSize = HORA_SIZE_THROUGH(XLA_FFI_Buffer, dims);
constexpr size_t kMetadataSize = HORA_SIZE_THROUGH(XLA_FFI_Metadata, traits);
constexpr size_t kMetadataExtensionSize = HORA_SIZE_THROUGH(XLA_FFI_Metadata_Extension, metadata);

const XLA_FFI_Buffer& buffer(void* const* items, int64_t size, size_t i, const char* what) {
  if (static_cast<int64_t>(i) >= size) {
    throw InvalidArgument(std::string("XLA passed no ") + what + " " + std::to_string(i));
  }
  const auto* b = static_cast<const XLA_FFI_Buffer*>(items[i]);
  if (b->struct_size < kBufferSize) {
    throw InvalidArgument(std::string("XLA passed a buffer struct older than this build reads"));
  }
  return *b;
}

}  // namespace

XlaCall::XlaCall(XLA_FFI_CallFrame* frame) : frame_(frame) {
  if (frame->struct_size < kCallFrameSize) {
    throw InvalidArgument("this XLA passes a call frame older than the one Hora reads (FFI " +
                          std::to_string(HORA_XLA_FFI_API_MAJOR) + "." +
                          std::to_string(HORA_XLA_FFI_API_MINOR) + ")");
  }
  if (frame->stage != XLA_FFI_ExecutionStage_EXECUTE) {
    throw InvalidArgument("Hora's custom calls run only in XLA's execute stage, got stage " +
                          std::to_string(static_cast<int>(frame->stage)));
  }
}

const void* XlaCall::attr(std::string_view name, XLA_FFI_AttrType type) const {
  const XLA_FFI_Attrs& attrs = frame_->attrs;
  for (int64_t i = 0; i < attrs.size; ++i) {  // a handful of attributes: a scan is cheapest
    const XLA_FFI_ByteSpan* key = attrs.names[i];
    if (std::string_view(key->ptr, key->len) != name) continue;
    if (attrs.types[i] != type) {
      throw InvalidArgument("attribute '" + std::string(name) +
                            "' of a Hora custom call has the "
                            "wrong type");
    }
    return attrs.attrs[i];
  }
  throw InvalidArgument("a Hora custom call lacks its attribute '" + std::string(name) + "'");
}

int64_t XlaCall::intAttr(std::string_view name) const {
  const auto* scalar = static_cast<const XLA_FFI_Scalar*>(attr(name, XLA_FFI_AttrType_SCALAR));
  switch (scalar->dtype) {
    case XLA_FFI_DataType_S64: return *static_cast<const int64_t*>(scalar->value);
    case XLA_FFI_DataType_S32: return *static_cast<const int32_t*>(scalar->value);
    default: throw InvalidArgument("attribute '" + std::string(name) + "' is not an integer");
  }
}

double XlaCall::floatAttr(std::string_view name) const {
  const auto* scalar = static_cast<const XLA_FFI_Scalar*>(attr(name, XLA_FFI_AttrType_SCALAR));
  switch (scalar->dtype) {
    case XLA_FFI_DataType_F64: return *static_cast<const double*>(scalar->value);
    case XLA_FFI_DataType_F32: return *static_cast<const float*>(scalar->value);
    default: throw InvalidArgument("attribute '" + std::string(name) + "' is not a float");
  }
}

std::string_view XlaCall::stringAttr(std::string_view name) const {
  const auto* span = static_cast<const XLA_FFI_ByteSpan*>(attr(name, XLA_FFI_AttrType_STRING));
  return {span->ptr, span->len};
}

const XLA_FFI_Buffer& XlaCall::arg(size_t i) const {
  return buffer(frame_->args.args, frame_->args.size, i, "argument");
}

const XLA_FFI_Buffer& XlaCall::ret(size_t i) const {
  return buffer(frame_->rets.rets, frame_->rets.size, i, "result");
}

bool answerMetadataQuery(XLA_FFI_CallFrame* frame) {
  XLA_FFI_Extension_Base* ext = frame->extension_start;
  if (ext == nullptr || ext->type != XLA_FFI_Extension_Metadata) return false;
  auto* query = reinterpret_cast<XLA_FFI_Metadata_Extension*>(ext);
  if (ext->struct_size < kMetadataExtensionSize || query->metadata == nullptr ||
      query->metadata->struct_size < kMetadataSize) {
    return true;  // nothing this build can fill in; XLA then refuses the handler itself
  }
  XLA_FFI_Metadata& metadata = *query->metadata;
  metadata.api_version = XLA_FFI_Api_Version{sizeof(XLA_FFI_Api_Version), nullptr,
                                             HORA_XLA_FFI_API_MAJOR, HORA_XLA_FFI_API_MINOR};
  metadata.traits = 0;
  if (metadata.struct_size >= sizeof(XLA_FFI_Metadata)) metadata.state_type_id.type_id = 0;
  return true;
}

XLA_FFI_Error* xlaError(const XLA_FFI_CallFrame* frame, XLA_FFI_Error_Code code,
                        const std::string& message) {
  XLA_FFI_Error_Create_Args args;
  std::memset(&args, 0, sizeof(args));
  args.struct_size = sizeof(args);
  args.message = message.c_str();
  args.errc = code;
  return frame->api->XLA_FFI_Error_Create(&args);
}

DataType hostDataType(XLA_FFI_DataType type) {
  switch (type) {
    case XLA_FFI_DataType_PRED: return DataType::Bool;
    case XLA_FFI_DataType_S8: return DataType::Int8;
    case XLA_FFI_DataType_S16: return DataType::Int16;
    case XLA_FFI_DataType_S32: return DataType::Int32;
    case XLA_FFI_DataType_S64: return DataType::Int64;
    case XLA_FFI_DataType_U8: return DataType::UInt8;
    case XLA_FFI_DataType_U16: return DataType::UInt16;
    case XLA_FFI_DataType_F16: return DataType::Float16;
    case XLA_FFI_DataType_BF16: return DataType::BFloat16;
    case XLA_FFI_DataType_F32: return DataType::Float32;
    case XLA_FFI_DataType_F64: return DataType::Float64;
    default:
      throw InvalidArgument("Hora does not reduce XLA element type " +
                            std::to_string(static_cast<int>(type)) +
                            " (uint32, uint64 and complex types are not supported)");
  }
}

size_t byteSize(const XLA_FFI_Buffer& buffer) {
  size_t count = 1;
  for (int64_t i = 0; i < buffer.rank; ++i) count *= static_cast<size_t>(buffer.dims[i]);
  return count * dtypeSize(hostDataType(buffer.dtype));
}

std::vector<int64_t> shapeOf(const XLA_FFI_Buffer& buffer) {
  return std::vector<int64_t>(buffer.dims, buffer.dims + buffer.rank);
}

}  // namespace hora::bindings
