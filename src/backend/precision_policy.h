#pragma once
// Which precision a run's products use: what the user asked for ("auto", "fp32" or "bf16"), where "auto"
// is bf16 on a backend whose bf16 products run at full speed and fp32 elsewhere.

#include <string>

#include "core/precision.h"

namespace zaya {

class Ops;

// Throws Error (field `field`) for a setting other than auto, fp32 or bf16.
Precision resolve_precision(const std::string& setting, const Ops& ops, const char* field = "precision");

// One line for the log: the precision, and why when it was chosen automatically.
std::string describe_precision(const std::string& setting, Precision chosen);

}  // namespace zaya
