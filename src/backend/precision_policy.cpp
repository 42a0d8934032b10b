#include "backend/precision_policy.h"

#include "backend/ops.h"
#include "core/error.h"

namespace zaya {

Precision resolve_precision(const std::string& setting, const Ops& ops, const char* field) {
  if (setting == "auto") return ops.fast_bf16() ? Precision::BF16 : Precision::F32;
  if (const std::optional<Precision> precision = precision_from_name(setting)) return *precision;
  throw Error("expected \"auto\", \"fp32\" or \"bf16\", got \"" + setting + "\"").field(field);
}

std::string describe_precision(const std::string& setting, Precision chosen) {
  std::string out = cat("precision ", precision_name(chosen));
  if (chosen == Precision::BF16) {
    out +=
        " (bf16 products with f32 sums; f32 master weights, optimizer state, norms, softmax, router, loss)";
  }
  if (setting == "auto") {
    // Only a CPU without AVX512-BF16 or AMX is slow at bf16; every GPU backend is fast.
    out += chosen == Precision::BF16
               ? ": chosen automatically, the device multiplies bf16 at full speed (a GPU, or a CPU with "
                 "AVX512-BF16 or AMX)"
               : ": chosen automatically, the CPU has neither AVX512-BF16 nor AMX";
  }
  return out;
}

}  // namespace zaya
