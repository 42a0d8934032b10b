#include "core/tensor.h"

#include <cstring>

#include "core/error.h"

namespace zaya {

Shape::Shape(std::initializer_list<int64_t> dims) {
  for (int64_t dim : dims) push_back(dim);
}

void Shape::push_back(int64_t dim) {
  if (rank_ == kMaxRank) throw Error(cat("a shape has at most ", kMaxRank, " dimensions"));
  dims_[rank_++] = dim;
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i) {
    if (dims_[i] != other.dims_[i]) return false;
  }
  return true;
}

std::string Shape::to_string() const {
  std::string out = "[";
  for (int i = 0; i < rank_; ++i) out += (i ? ", " : "") + std::to_string(dims_[i]);
  return out + "]";
}

Tensor::Tensor(DType dtype, Shape shape)
    : buffer_(size_t(shape.numel()) * dtype_size(dtype)), dtype_(dtype), shape_(shape) {}

void convert_to_f32(const TensorView& src, float* dst) {
  const auto* bytes = static_cast<const unsigned char*>(src.data);
  const int64_t n = src.numel();
  switch (src.dtype) {
    case DType::F32:
      std::memcpy(dst, bytes, size_t(n) * 4);
      return;
    case DType::BF16:
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t bits;
        std::memcpy(&bits, bytes + 2 * i, 2);
        dst[i] = src.dtype == DType::BF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
      }
      return;
    case DType::F64:
      for (int64_t i = 0; i < n; ++i) {
        double value;
        std::memcpy(&value, bytes + 8 * i, 8);
        dst[i] = float(value);
      }
      return;
    default:
      throw Error(cat("cannot convert dtype ", dtype_name(src.dtype), " to F32"));
  }
}

}  // namespace zaya
