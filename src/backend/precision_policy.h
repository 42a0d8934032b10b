#pragma once
// Which precision a run's products use: what the user asked for ("auto", "fp32" or "bf16"). "auto" is
// decided by measuring, on a CPU: the machine's fp32 and bf16 rates on the products that dominate the
// command's work, bf16 only where it is faster by a clear margin (a CPU that "has" bf16 instructions may run
// them at half its sgemm's speed: an Intel Xeon without AMX, 168 against 327 GFLOP/s). On a GPU it is bf16.

#include <string>
#include <vector>

#include "core/precision.h"

namespace zaya {

class Ops;
struct Device;

// C [m, n] = A [m, k] B^T [n, k], B a weight (bf16 in a bf16 run): one of a command's products.
struct ProductShape {
  int64_t m = 0, n = 0, k = 0;
};

// Products per second in each precision over a list of shapes, as FLOP/s; 0 where a precision cannot run.
struct PrecisionRates {
  double fp32 = 0, bf16 = 0;
};

// bf16 where its rate is at least kBf16Margin times fp32's: a margin that the noise of a busy machine does
// not cross, so that a run's precision (and its bits) does not follow the load at its start.
inline constexpr double kBf16Margin = 1.2;
Precision choose_precision(const PrecisionRates& rates);

// Times each shape in both precisions on one thread, alternating, for about `seconds` in all (at least 3
// rounds): each shape's fastest time counts. bf16 gets bf16 operands, as a bf16 run's weights and rounded
// inputs are.
PrecisionRates measure_precision_rates(Ops& ops, const std::vector<ProductShape>& shapes,
                                       double seconds = 0.5);

// A setting resolved, with the line the log prints for it ("precision bf16 (...): chosen by measuring ...").
struct PrecisionChoice {
  Precision precision = Precision::F32;
  std::string description;
};

// Throws Error (field `field`) for a setting other than auto, fp32 or bf16. "auto" measures on `shapes`
// where `device` is the CPU.
PrecisionChoice resolve_precision(const std::string& setting, const Device& device,
                                  const std::vector<ProductShape>& shapes, const char* field = "precision");

// The setting by name alone, for a setting that is not "auto" (or one decided earlier); throws Error
// (field `field`) for anything else.
Precision precision_setting(const std::string& setting, const char* field);

// One line for the log: the precision and what it means; `why` says how it was chosen (may be empty).
std::string describe_precision(Precision precision, const std::string& why);

}  // namespace zaya
