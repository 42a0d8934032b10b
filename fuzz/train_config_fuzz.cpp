// A run's TOML with --set overrides: the lines after the separator are each one override.
#include <sstream>
#include <vector>

#include "core/error.h"
#include "fuzz_input.h"
#include "train/train_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [toml, sets] = zaya::fuzz::split_input(data, size);
  std::vector<std::string> overrides;
  std::istringstream lines{std::string(sets)};
  for (std::string line; std::getline(lines, line);) overrides.push_back(line);
  try {
    (void)zaya::parse_train_config(toml, "run.toml", overrides);
  } catch (const zaya::Error&) {
  }
  return 0;
}
