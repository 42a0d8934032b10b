#pragma once
// Reads the tensors of a reference fixture (tests/fixtures/.../reference.safetensors) into plain vectors.

#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace zaya::test {

class ReferenceData {
 public:
  explicit ReferenceData(const std::string& path) : file_(path) {}
  bool has(const std::string& name) const { return file_.find(name) != nullptr; }
  Shape shape(const std::string& name) const;
  std::vector<float> floats(const std::string& name) const;  // any float dtype
  std::vector<int32_t> ints(const std::string& name) const;  // I32 or I64

 private:
  const SafetensorsEntry& entry(const std::string& name) const;
  SafetensorsFile file_;
};

// |a - b| / |b| over whole tensors (L2 norms); 0 when both are zero.
double relative_error(const std::vector<float>& got, const std::vector<float>& want);
double max_abs(const std::vector<float>& values);
double max_abs_diff(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace zaya::test
