#include "train/trainer.h"

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "model/model_dims.h"
#include "train/training_run.h"

namespace zaya {
namespace fs = std::filesystem;

ZayaConfig resolve_model_config(const TrainConfig& config, int64_t tokenizer_vocab,
                                std::optional<int32_t> pad, std::optional<int32_t> bos,
                                std::optional<int32_t> eos) {
  const ModelSection& m = config.model;
  ZayaConfig out;
  if (!m.preset.empty()) {
    out = preset_config(m.preset);
  } else if (!m.config.empty()) {
    out = load_config(m.config);
  } else {
    out = load_config((fs::path(m.init) / "config.json").string());
  }
  if (m.init.empty()) {
    out.vocab_size = m.vocab_size > 0 ? m.vocab_size : tokenizer_vocab;
    out.pad_token_id = pad;
    out.bos_token_id = bos;
    out.eos_token_id.clear();
    if (eos) out.eos_token_id.push_back(*eos);
  }
  if (out.vocab_size < tokenizer_vocab) {
    throw Error(cat("the model's vocabulary (", out.vocab_size, ") is smaller than the tokenizer's (",
                    tokenizer_vocab, ")"))
        .file(config.source)
        .field("model.vocab_size");
  }
  for (const StageConfig& stage : config.stages) {
    out.max_position_embeddings = std::max(out.max_position_embeddings, stage.seq_len);
  }
  validate_config(out, config.source);
  return out;
}

TrainResult run_training(const TrainConfig& config, const std::string& run_dir, const std::atomic<bool>& stop,
                         Communicator& world, bool force) {
  TrainingRun run(config, run_dir, stop, world, force);
  return run.run();
}

}  // namespace zaya
