// XlaCall (bindings/xla_call.h): how hora.jax's custom-call handler reads an XLA FFI call frame,
// answers XLA's metadata query and reports errors, against frames built here the way XLA
// lays them out (third_party/xla_ffi/xla_ffi.h).
#include "bindings/xla_call.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/common/errors.h"

namespace hora::bindings {
namespace {

// XLA's side of one call: the API table (only Error_Create is used), buffers and attributes.
struct FakeXla {
  static std::string lastMessage;
  static XLA_FFI_Error_Code lastCode;
  static XLA_FFI_Error* createError(XLA_FFI_Error_Create_Args* args) {
    lastMessage = args->message;
    lastCode = args->errc;
    return reinterpret_cast<XLA_FFI_Error*>(0x1);  // opaque to the handler
  }

  XLA_FFI_Api api{};
  XLA_FFI_CallFrame frame{};
  std::vector<int64_t> dims{2, 3};
  XLA_FFI_Buffer token{}, input{}, output{};
  std::vector<void*> args, rets;
  std::vector<XLA_FFI_ArgType> argTypes;
  std::vector<XLA_FFI_RetType> retTypes;
  // Attributes, sorted by name as XLA passes them.
  int64_t kind = 0;
  double scale = 0.5;
  XLA_FFI_Scalar kindScalar{XLA_FFI_DataType_S64, &kind};
  XLA_FFI_Scalar scaleScalar{XLA_FFI_DataType_F64, &scale};
  std::string namesText = "allreduce.a\nallreduce.b";
  XLA_FFI_ByteSpan namesSpan{namesText.data(), namesText.size()};
  XLA_FFI_ByteSpan keys[3] = {{"kind", 4}, {"names", 5}, {"prescale", 8}};
  XLA_FFI_ByteSpan* keyPtrs[3] = {&keys[0], &keys[1], &keys[2]};
  XLA_FFI_AttrType attrTypes[3] = {XLA_FFI_AttrType_SCALAR, XLA_FFI_AttrType_STRING,
                                   XLA_FFI_AttrType_SCALAR};
  void* attrValues[3] = {&kindScalar, &namesSpan, &scaleScalar};
  float data[6] = {1, 2, 3, 4, 5, 6};

  FakeXla() {
    api.struct_size = sizeof(api);
    api.XLA_FFI_Error_Create = &createError;
    for (XLA_FFI_Buffer* b : {&token, &input, &output}) b->struct_size = sizeof(XLA_FFI_Buffer);
    token.dtype = XLA_FFI_DataType_TOKEN;
    input.dtype = output.dtype = XLA_FFI_DataType_F32;
    input.rank = output.rank = 2;
    input.dims = output.dims = dims.data();
    input.data = output.data = data;
    args = {&token, &input};
    rets = {&token, &output};
    argTypes.assign(2, XLA_FFI_ArgType_BUFFER);
    retTypes.assign(2, XLA_FFI_RetType_BUFFER);
    frame.struct_size = sizeof(frame);
    frame.api = &api;
    frame.stage = XLA_FFI_ExecutionStage_EXECUTE;
    frame.args = {sizeof(XLA_FFI_Args), nullptr, 2, argTypes.data(), args.data()};
    frame.rets = {sizeof(XLA_FFI_Rets), nullptr, 2, retTypes.data(), rets.data()};
    frame.attrs = {sizeof(XLA_FFI_Attrs), nullptr, 3, attrTypes, keyPtrs, attrValues};
  }
};
std::string FakeXla::lastMessage;
XLA_FFI_Error_Code FakeXla::lastCode = XLA_FFI_Error_Code_OK;

TEST(XlaCall, ReadsAttributesByNameAndBuffersByPosition) {
  FakeXla xla;
  XlaCall call(&xla.frame);
  EXPECT_EQ(call.intAttr("kind"), 0);
  EXPECT_DOUBLE_EQ(call.floatAttr("prescale"), 0.5);
  EXPECT_EQ(call.stringAttr("names"), "allreduce.a\nallreduce.b");
  ASSERT_EQ(call.argCount(), 2u);
  EXPECT_EQ(call.arg(0).dtype, XLA_FFI_DataType_TOKEN);
  EXPECT_EQ(shapeOf(call.arg(1)), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(byteSize(call.ret(1)), 6 * sizeof(float));
  EXPECT_THROW(call.arg(2), InvalidArgument);
}

TEST(XlaCall, RefusesMissingOrMistypedAttributes) {
  FakeXla xla;
  XlaCall call(&xla.frame);
  EXPECT_THROW(call.intAttr("root_rank"), InvalidArgument);
  EXPECT_THROW(call.intAttr("names"), InvalidArgument);   // a string
  EXPECT_THROW(call.floatAttr("kind"), InvalidArgument);  // an integer
  EXPECT_THROW(call.stringAttr("prescale"), InvalidArgument);
}

TEST(XlaCall, RefusesOldFramesAndOtherStages) {
  FakeXla xla;
  xla.frame.stage = XLA_FFI_ExecutionStage_PREPARE;
  EXPECT_THROW(XlaCall{&xla.frame}, InvalidArgument);
  FakeXla old;
  old.frame.struct_size = offsetof(XLA_FFI_CallFrame, attrs);  // from before the attributes
  EXPECT_THROW(XlaCall{&old.frame}, InvalidArgument);
}

TEST(XlaCall, AnswersTheMetadataQueryWithItsApiVersion) {
  FakeXla xla;
  EXPECT_FALSE(answerMetadataQuery(&xla.frame));  // an ordinary call
  XLA_FFI_Metadata metadata;
  std::memset(&metadata, 0xff, sizeof(metadata));
  metadata.struct_size = sizeof(metadata);
  XLA_FFI_Metadata_Extension query{
      {sizeof(XLA_FFI_Metadata_Extension), XLA_FFI_Extension_Metadata, nullptr}, &metadata};
  xla.frame.extension_start = &query.extension_base;
  ASSERT_TRUE(answerMetadataQuery(&xla.frame));
  EXPECT_EQ(metadata.api_version.major_version, HORA_XLA_FFI_API_MAJOR);
  EXPECT_EQ(metadata.api_version.minor_version, HORA_XLA_FFI_API_MINOR);
  EXPECT_EQ(metadata.api_version.struct_size, sizeof(XLA_FFI_Api_Version));
  EXPECT_EQ(metadata.traits, 0u);
  EXPECT_EQ(metadata.state_type_id.type_id, 0);
}

TEST(XlaCall, ErrorsAreMadeByXlasApiWithTheirCode) {
  FakeXla xla;
  XLA_FFI_Error* error =
      xlaError(&xla.frame, XLA_FFI_Error_Code_FAILED_PRECONDITION, "hora.errors.MismatchError: x");
  EXPECT_NE(error, nullptr);
  EXPECT_EQ(FakeXla::lastMessage, "hora.errors.MismatchError: x");
  EXPECT_EQ(FakeXla::lastCode, XLA_FFI_Error_Code_FAILED_PRECONDITION);
}

TEST(XlaCall, MapsEveryElementTypeTheEngineCarries) {
  EXPECT_EQ(hostDataType(XLA_FFI_DataType_PRED), DataType::Bool);
  EXPECT_EQ(hostDataType(XLA_FFI_DataType_S8), DataType::Int8);
  EXPECT_EQ(hostDataType(XLA_FFI_DataType_U8), DataType::UInt8);
  EXPECT_EQ(hostDataType(XLA_FFI_DataType_S16), DataType::Int16);
  EXPECT_EQ(hostDataType(XLA_FFI_DataType_U16), DataType::UInt16);
  EXPECT_EQ(hostDataType(XLA_FFI_DataType_S32), DataType::Int32);
  EXPECT_EQ(hostDataType(XLA_FFI_DataType_S64), DataType::Int64);
  EXPECT_EQ(hostDataType(XLA_FFI_DataType_F16), DataType::Float16);
  EXPECT_EQ(hostDataType(XLA_FFI_DataType_BF16), DataType::BFloat16);
  EXPECT_EQ(hostDataType(XLA_FFI_DataType_F32), DataType::Float32);
  EXPECT_EQ(hostDataType(XLA_FFI_DataType_F64), DataType::Float64);
  for (XLA_FFI_DataType t : {XLA_FFI_DataType_U32, XLA_FFI_DataType_U64, XLA_FFI_DataType_C64,
                             XLA_FFI_DataType_C128, XLA_FFI_DataType_TOKEN}) {
    EXPECT_THROW(hostDataType(t), InvalidArgument) << static_cast<int>(t);
  }
}

}  // namespace
}  // namespace hora::bindings
