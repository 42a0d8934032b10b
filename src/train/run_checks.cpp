#include "train/run_checks.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <set>

#include "core/error.h"
#include "data/dataset_provenance.h"
#include "tokenizer/tokenizer.h"
#include "train/checkpoint.h"
#include "train/checkpoint_catalog.h"

namespace zaya {
namespace fs = std::filesystem;

namespace {

// Training sets without a record of their tokenizer are read whole up to this many tokens before the first
// step; a larger one is checked as its tokens are read.
constexpr int64_t kScannedTrainingTokens = int64_t(1) << 28;

}  // namespace

bool is_run_entry(const std::string& name) {
  return name == "config.toml" || name == "metrics.jsonl" || name == "tb" || name == "checkpoints" ||
         name == ".lock";
}

void claim_run_directory(const std::string& run_dir, bool force) {
  std::error_code error;
  if (!fs::exists(run_dir, error) || force) return;
  if (!fs::is_directory(run_dir, error))
    throw Error("is a file, not a directory").file(run_dir).field("--run-dir");
  if (!choose_checkpoint(run_dir).path.empty()) return;  // a run of zaya's: it touches its own entries alone
  try {
    for (const fs::directory_entry& entry : fs::directory_iterator(run_dir)) {
      const std::string name = entry.path().filename().string();
      if (is_run_entry(name)) continue;
      throw Error(
          cat("holds ", name,
              ", which is not a run's (config.toml, metrics.jsonl, tb/, checkpoints/); choose another "
              "directory, or pass --force to train beside it (zaya touches only its own entries)"))
          .file(run_dir)
          .field("--run-dir");
    }
  } catch (const fs::filesystem_error& e) {
    throw Error(cat("cannot be read: ", e.code().message())).file(run_dir).field("--run-dir");
  }
}

std::vector<std::string> check_datasets(const TrainConfig& config, const Tokenizer& tokenizer,
                                        int64_t vocab) {
  std::vector<std::string> notes;
  std::set<std::string> checked;
  auto check = [&](const std::string& prefix, const std::string& key, int64_t scan_tokens) {
    if (!checked.insert(prefix).second) return;
    try {
      const std::string note = check_dataset(prefix, tokenizer, config.data.tokenizer, vocab, scan_tokens);
      if (!note.empty()) notes.push_back(note);
    } catch (Error& e) {
      if (e.file_name().empty()) e.file(prefix);
      throw Error(e.what()).field(key);
    }
  };
  if (!config.data.validation.empty())
    check(config.data.validation, "data.validation", std::numeric_limits<int64_t>::max());
  for (size_t s = 0; s < config.stages.size(); ++s) {
    for (const auto& [prefix, weight] : config.stages[s].mixture)
      check(prefix, cat("stages[", s, "].mixture"), kScannedTrainingTokens);
  }
  return notes;
}

std::vector<std::string> check_resume(const std::string& checkpoint_dir, const TrainerState& state,
                                      const ZayaConfig& checkpoint, const TrainConfig& config,
                                      const Tokenizer& tokenizer, ZayaConfig configured) {
  const fs::path dir(checkpoint_dir);
  const fs::path recorded_tokenizer = dir / "tokenizer.json";
  if (fs::exists(recorded_tokenizer)) {
    const Tokenizer recorded = Tokenizer::load(recorded_tokenizer.string());
    if (recorded.fingerprint() != tokenizer.fingerprint()) {
      throw Error(cat("is not the tokenizer the run was made with (", recorded_tokenizer.string(), ", ",
                      recorded.fingerprint(), "; this one is ", tokenizer.fingerprint(),
                      "): its token ids would mean other text"))
          .file(config.data.tokenizer)
          .field("data.tokenizer");
    }
  }
  // The RoPE theta the run applies at the checkpoint's stage: the last one set by a stage up to it.
  const int64_t last = std::min<int64_t>(state.stage, int64_t(config.stages.size()) - 1);
  for (int64_t s = 0; s <= last; ++s) {
    if (config.stages[size_t(s)].rope_theta <= 0) continue;
    for (auto& [type, rope] : configured.rope_parameters)
      rope.rope_theta = config.stages[size_t(s)].rope_theta;
  }
  const std::string difference = model_difference(checkpoint, configured);
  if (!difference.empty()) {
    throw Error(cat("describes another model than the checkpoint it would resume (", checkpoint_dir, "): ",
                    difference, " (checkpoint against configuration); train it in another run directory"))
        .file(config.source)
        .field("model");
  }
  std::vector<std::string> changes;
  if (state.settings.empty()) return changes;  // a checkpoint from before settings were recorded
  std::set<std::string> keys;
  for (const auto& [key, value] : state.settings) keys.insert(key);
  for (const auto& [key, value] : config.settings) keys.insert(key);
  for (const std::string& key : keys) {
    const auto before = state.settings.find(key), now = config.settings.find(key);
    const std::string was = before == state.settings.end() ? "(unset)" : before->second;
    const std::string is = now == config.settings.end() ? "(unset)" : now->second;
    if (was != is) changes.push_back(cat(key, ": ", was, " -> ", is));
  }
  return changes;
}

}  // namespace zaya
