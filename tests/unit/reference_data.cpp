#include "unit/reference_data.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace zaya::test {

const SafetensorsEntry& ReferenceData::entry(const std::string& name) const {
  const SafetensorsEntry* found = file_.find(name);
  if (!found) throw std::runtime_error("fixture lacks " + name);
  return *found;
}

Shape ReferenceData::shape(const std::string& name) const {
  return entry(name).shape;
}

std::vector<float> ReferenceData::floats(const std::string& name) const {
  const TensorView view = file_.view(entry(name));
  std::vector<float> out(size_t(view.numel()));
  convert_to_f32(view, out.data());
  return out;
}

std::vector<int32_t> ReferenceData::ints(const std::string& name) const {
  const TensorView view = file_.view(entry(name));
  std::vector<int32_t> out(size_t(view.numel()));
  const auto* bytes = static_cast<const unsigned char*>(view.data);
  for (size_t i = 0; i < out.size(); ++i) {
    if (view.dtype == DType::I64) {
      int64_t value;
      std::memcpy(&value, bytes + 8 * i, 8);
      out[i] = int32_t(value);
    } else if (view.dtype == DType::I32) {
      std::memcpy(&out[i], bytes + 4 * i, 4);
    } else {
      throw std::runtime_error(name + " is not an integer tensor");
    }
  }
  return out;
}

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
    norm += double(want[i]) * want[i];
  }
  if (norm == 0) return diff == 0 ? 0 : INFINITY;
  return std::sqrt(diff / norm);
}

double max_abs(const std::vector<float>& values) {
  double out = 0;
  for (float v : values) out = std::max(out, double(std::abs(v)));
  return out;
}

double max_abs_diff(const std::vector<float>& got, const std::vector<float>& want) {
  double out = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    out = std::max(out, std::abs(double(got[i]) - want[i]));
  return got.size() == want.size() ? out : INFINITY;
}

}  // namespace zaya::test
