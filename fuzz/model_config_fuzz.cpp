// A model's config.json: parsing, validation, and writing it back (which must parse again to the same).
#include "core/error.h"
#include "fuzz_input.h"
#include "io/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const zaya::ZayaConfig config =
        zaya::parse_config({reinterpret_cast<const char*>(data), size}, "config.json");
    const std::string written = zaya::config_to_json(config);
    if (zaya::config_to_json(zaya::parse_config(written, "written.json")) != written) __builtin_trap();
  } catch (const zaya::Error&) {
  }
  return 0;
}
