#include "core/dtype.h"

#include <array>
#include <cmath>

namespace zaya {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
  bool is_float;
};

constexpr std::array<DTypeInfo, 15> kInfo = {{
    {DType::F32, "F32", 4, true},
    {DType::BF16, "BF16", 2, true},
    {DType::F16, "F16", 2, true},
    {DType::F64, "F64", 8, true},
    {DType::I8, "I8", 1, false},
    {DType::U8, "U8", 1, false},
    {DType::I16, "I16", 2, false},
    {DType::U16, "U16", 2, false},
    {DType::I32, "I32", 4, false},
    {DType::U32, "U32", 4, false},
    {DType::I64, "I64", 8, false},
    {DType::U64, "U64", 8, false},
    {DType::Bool, "BOOL", 1, false},
    {DType::F8E4M3, "F8_E4M3", 1, true},
    {DType::F8E5M2, "F8_E5M2", 1, true},
}};

const DTypeInfo& info(DType dtype) {
  return kInfo[static_cast<size_t>(dtype)];
}

}  // namespace

size_t dtype_size(DType dtype) {
  return info(dtype).size;
}
std::string_view dtype_name(DType dtype) {
  return info(dtype).name;
}
bool dtype_is_float(DType dtype) {
  return info(dtype).is_float;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeInfo& entry : kInfo) {
    if (entry.name == name) return entry.dtype;
  }
  return std::nullopt;
}

float f16_to_f32(uint16_t bits) {
  const int sign = bits >> 15, exponent = (bits >> 10) & 0x1f, mantissa = bits & 0x3ff;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(float(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa ? NAN : INFINITY;
  } else {
    magnitude = std::ldexp(float(mantissa | 0x400), exponent - 25);
  }
  return sign ? -magnitude : magnitude;
}

}  // namespace zaya
