#pragma once
// What the commands that read and write text with a model (generate, eval, serve) load: the model directory
// and its tokenizer.json (or another one), checked against each other.

#include <string>

#include "data/tokenizer.h"
#include "model/model_io.h"

namespace zaya::cli {

struct ModelWithTokenizer {
  LoadedModel model;
  Tokenizer tokenizer;
  std::string tokenizer_path;
};

// tokenizer_path empty: the model directory's tokenizer.json. Throws Error when the tokenizer has ids the
// model has no embedding for. expert_values: as load_model's.
ModelWithTokenizer load_model_with_tokenizer(const std::string& model_dir, const std::string& tokenizer_path,
                                             ExpertValues expert_values = ExpertValues::F32);

}  // namespace zaya::cli
