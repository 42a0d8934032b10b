#include "cli/validators.h"

#include <cerrno>
#include <cstdlib>
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

}  // namespace

const CLI::Validator& positive() {
  static const CLI::Validator check = number_check([](long double v) { return v > 0; }, "positive");
  return check;
}

const CLI::Validator& non_negative() {
  static const CLI::Validator check = number_check([](long double v) { return v >= 0; }, "non-negative");
  return check;
}

}  // namespace zaya::cli
