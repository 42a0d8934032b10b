#pragma once
// Shapes and tensor views. A TensorView is a pointer, a dtype and a shape (row-major, contiguous); it
// owns nothing. A Tensor owns an AlignedBuffer and hands out views of it.

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/buffer.h"
#include "core/dtype.h"

namespace zaya {

class Shape {
 public:
  static constexpr int kMaxRank = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int axis) const { return dims_[axis]; }
  int64_t& operator[](int axis) { return dims_[axis]; }
  void push_back(int64_t dim);
  int64_t numel() const;
  bool operator==(const Shape& other) const;
  std::string to_string() const;  // "[2, 3, 4]"

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::F32;
  Shape shape;

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }

  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // zero-filled

  TensorView view() const { return {const_cast<void*>(buffer_.data()), dtype_, shape_}; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return shape_.numel(); }

  template <class T>
  T* as() {
    return buffer_.as<T>();
  }
  template <class T>
  const T* as() const {
    return buffer_.as<T>();
  }

 private:
  AlignedBuffer buffer_;
  DType dtype_ = DType::F32;
  Shape shape_;
};

// Converts any floating-point view (f32, bf16, f16, f64) to f32 in dst, which holds numel() floats.
// The source may be unaligned (safetensors data offsets need not be). Throws for non-float dtypes.
void convert_to_f32(const TensorView& src, float* dst);

}  // namespace zaya
