#pragma once
// Element types: the four zaya computes with (f32, bf16, i32, i64) and the others safetensors files may
// hold, so that any valid file can be read and converted.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace zaya {

enum class DType : uint8_t {
  F32,
  BF16,
  F16,
  F64,
  I8,
  U8,
  I16,
  U16,
  I32,
  U32,
  I64,
  U64,
  Bool,
  F8E4M3,
  F8E5M2
};

size_t dtype_size(DType dtype);
// The safetensors spelling: "F32", "BF16", "I64", ...
std::string_view dtype_name(DType dtype);
std::optional<DType> dtype_from_name(std::string_view name);
bool dtype_is_float(DType dtype);

// A bf16 value as its raw bits: a distinct type, so that bf16 buffers are never mistaken for u16 or f16.
struct BFloat16 {
  uint16_t bits;
};

inline float bf16_to_f32(uint16_t bits) {
  uint32_t wide = uint32_t(bits) << 16;
  float out;
  std::memcpy(&out, &wide, sizeof out);
  return out;
}

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

float f16_to_f32(uint16_t bits);

}  // namespace zaya
