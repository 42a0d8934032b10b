// A run's checkpoint metadata as resume reads it: RUN/checkpoints/step_5/ with a fuzzed trainer_state.json
// (the input's first part), a fuzzed checkpoints/latest (the second), and a checksums.json that is the
// third part when there is one, else the true checksums of the directory's files (so that the state is
// what gets checked, not only the listing).
#include <string>

#include "core/error.h"
#include "fuzz_input.h"
#include "train/checkpoint_catalog.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto [state, rest] = zaya::fuzz::split_input(data, size);
  const auto [latest, listing] =
      zaya::fuzz::split_input(reinterpret_cast<const uint8_t*>(rest.data()), rest.size());
  const std::string dir = "run/checkpoints/step_5/";
  const std::string state_path = zaya::fuzz::write_scratch(dir + zaya::kCheckpointStateFile, state);
  const std::string config_path = zaya::fuzz::write_scratch(dir + "config.json", "{}");
  const std::string shard_path = zaya::fuzz::write_scratch(dir + "optimizer-00000-of-00001.safetensors", "x");
  const std::string latest_path = zaya::fuzz::write_scratch("run/checkpoints/latest", latest);
  std::string checksums(listing);
  if (checksums.empty()) {
    checksums = "{\"config.json\": \"" + zaya::file_checksum(config_path) + "\", \"" +
                zaya::kCheckpointStateFile + "\": \"" + zaya::file_checksum(state_path) +
                "\", \"optimizer-00000-of-00001.safetensors\": \"" + zaya::file_checksum(shard_path) + "\"}";
  }
  zaya::fuzz::write_scratch(dir + zaya::kCheckpointChecksumFile, checksums);
  const std::string run =
      latest_path.substr(0, latest_path.size() - std::string("/checkpoints/latest").size());
  try {
    const zaya::CheckpointChoice choice = zaya::choose_checkpoint(run);
    if (!choice.path.empty() && choice.reason.empty()) __builtin_trap();
  } catch (const zaya::Error&) {
  }
  return 0;
}
