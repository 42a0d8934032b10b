// A model directory: config.json (before the separator) and model.safetensors (after), loaded as every
// command that takes --model loads it. Configurations of more than 4M parameters are skipped: their size is
// legitimate, and allocating it on every execution would only measure memset.
#include <filesystem>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/hf_config.h"
#include "model/model_dims.h"
#include "model/model_io.h"
#include "model/parameters.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [config, weights] = zaya::fuzz::split_input(data, size);
  try {
    if (zaya::ParameterTable(zaya::model_dims(zaya::parse_config(config, "config.json"))).total_floats() >
        (int64_t(1) << 22))
      return 0;
  } catch (const zaya::Error&) {
    return 0;
  }
  const std::string config_path = zaya::fuzz::write_scratch("model/config.json", config);
  zaya::fuzz::write_scratch("model/model.safetensors", weights);
  try {
    (void)zaya::load_model(std::filesystem::path(config_path).parent_path().string());
  } catch (const zaya::Error&) {
  }
  return 0;
}
