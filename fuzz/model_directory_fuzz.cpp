// A model directory: config.json (before the separator) and model.safetensors (after), loaded as every
// command that takes --model loads it. Configurations of more than 64 layers or 64K parameters are skipped:
// their size is legitimate, and building it on every execution would only measure the allocator. With 4M
// parameters and 65,536 layers allowed, the corpus drifted to such configurations and a run slowed from
// 2,600 to 160 executions/s. An input holds at most 4K weights (-max_len), so a larger configuration takes
// the same paths to its error as a smaller one.
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
    const zaya::ZayaConfig parsed = zaya::parse_config(config, "config.json");
    if (parsed.num_hidden_layers > 64 ||
        zaya::ParameterTable(zaya::model_dims(parsed)).total_floats() > (1 << 16))
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
