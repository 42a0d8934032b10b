#pragma once
// The precision of a run's matrix products: "fp32" (f32 inputs), or "bf16" (bf16 inputs, f32 accumulation
// and outputs; the master weights, the optimizer state and every statistic stay f32). docs/TRAINING.md
// gives the whole policy and why.

#include <optional>
#include <string_view>

namespace zaya {

enum class Precision : unsigned char { F32, BF16 };

std::string_view precision_name(Precision precision);  // "fp32" or "bf16"
std::optional<Precision> precision_from_name(std::string_view name);

}  // namespace zaya
