#include "cli/validators.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

namespace zaya::cli {
namespace {

// A check of the number a flag's text holds; text that is not a number is left to CLI11's conversion,
// which names the flag and the expected type.
CLI::Validator number_check(bool (*accept)(long double), const std::string& requirement) {
  return CLI::Validator(
      [accept, requirement](std::string& text) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long double value = std::strtold(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || errno == ERANGE) return "";
        return accept(value) ? "" : "must be " + requirement + ", got " + text;
      },
      requirement);
}

std::string shortest(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

}  // namespace

CLI::Validator in_range(double low, double high) {
  const std::string requirement = "a number in [" + shortest(low) + ", " + shortest(high) + "]";
  return CLI::Validator(
      [low, high, requirement](std::string& text) -> std::string {
        char* end = nullptr;
        const long double value = std::strtold(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0') return "";  // not a number: CLI11's conversion says so
        if (std::isfinite(value) && value >= low && value <= high) return "";
        return "must be " + requirement + ", got " + text;
      },
      requirement);
}

const CLI::Validator& positive() {
  static const CLI::Validator check = number_check([](long double v) { return v > 0; }, "positive");
  return check;
}

const CLI::Validator& non_negative() {
  static const CLI::Validator check = number_check([](long double v) { return v >= 0; }, "non-negative");
  return check;
}

}  // namespace zaya::cli
