#pragma once
// Element types and reduction operations. The numeric values of DataType and ReduceOp match
// Horovod's (ReduceOp: AVERAGE 0 .. PRODUCT 5) so that code passing raw constants keeps working;
// BFloat16 is Hora's addition.
#include <cstddef>
#include <cstdint>
#include <string>

namespace hora {

enum class DataType : uint8_t {
  UInt8 = 0,
  Int8 = 1,
  UInt16 = 2,
  Int16 = 3,
  Int32 = 4,
  Int64 = 5,
  Float16 = 6,
  Float32 = 7,
  Float64 = 8,
  Bool = 9,
  BFloat16 = 10,
};
constexpr int kNumDataTypes = 11;

size_t dtypeSize(DataType t);
const char* dtypeName(DataType t);  // "float32", "bfloat16", ...
bool dtypeFromName(const std::string& name, DataType* out);
bool isFloating(DataType t);

enum class ReduceOp : uint8_t { Average = 0, Sum = 1, Adasum = 2, Min = 3, Max = 4, Product = 5 };

const char* reduceOpName(ReduceOp op);  // "AVERAGE", "SUM", ...

}  // namespace hora
