#include "core/precision.h"

namespace zaya {

std::string_view precision_name(Precision precision) {
  return precision == Precision::BF16 ? "bf16" : "fp32";
}

std::optional<Precision> precision_from_name(std::string_view name) {
  if (name == "fp32") return Precision::F32;
  if (name == "bf16") return Precision::BF16;
  return std::nullopt;
}

}  // namespace zaya
