#pragma once
// Checks on numeric flags. CLI11's PositiveNumber and NonNegativeNumber print their upper bound, the largest
// double (309 digits), in every error; these say in a few words what is wrong.

#include <CLI/CLI.hpp>

namespace zaya::cli {

const CLI::Validator& positive();      // > 0
const CLI::Validator& non_negative();  // >= 0
// A finite number in [low, high] (inf and nan are refused: a deadline of inf seconds overflows).
CLI::Validator in_range(double low, double high);

}  // namespace zaya::cli
