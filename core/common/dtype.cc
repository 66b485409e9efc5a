#include "core/common/dtype.h"

#include "core/common/errors.h"

namespace hora {
namespace {

struct DtypeInfo {
  const char* name;
  size_t size;
  bool floating;
};

// Indexed by the DataType value.
constexpr DtypeInfo kDtypes[kNumDataTypes] = {
    {"uint8", 1, false},  {"int8", 1, false},  {"uint16", 2, false},  {"int16", 2, false},
    {"int32", 4, false},  {"int64", 8, false}, {"float16", 2, true},  {"float32", 4, true},
    {"float64", 8, true}, {"bool", 1, false},  {"bfloat16", 2, true},
};

const DtypeInfo& info(DataType t) {
  auto i = static_cast<int>(t);
  HORA_CHECK(i >= 0 && i < kNumDataTypes, "unknown dtype " + std::to_string(i));
  return kDtypes[i];
}

}  // namespace

size_t dtypeSize(DataType t) { return info(t).size; }
const char* dtypeName(DataType t) { return info(t).name; }
bool isFloating(DataType t) { return info(t).floating; }

bool dtypeFromName(const std::string& name, DataType* out) {
  for (int i = 0; i < kNumDataTypes; ++i) {
    if (name == kDtypes[i].name) {
      *out = static_cast<DataType>(i);
      return true;
    }
  }
  return false;
}

const char* reduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::Average: return "AVERAGE";
    case ReduceOp::Sum: return "SUM";
    case ReduceOp::Adasum: return "ADASUM";
    case ReduceOp::Min: return "MIN";
    case ReduceOp::Max: return "MAX";
    case ReduceOp::Product: return "PRODUCT";
  }
  return "UNKNOWN";
}

}  // namespace hora
