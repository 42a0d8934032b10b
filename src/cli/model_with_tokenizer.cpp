#include "cli/model_with_tokenizer.h"

#include <filesystem>

#include "core/error.h"

namespace zaya::cli {

ModelWithTokenizer load_model_with_tokenizer(const std::string& model_dir, const std::string& tokenizer_path,
                                             ExpertValues expert_values) {
  const std::string path = tokenizer_path.empty()
                               ? (std::filesystem::path(model_dir) / "tokenizer.json").string()
                               : tokenizer_path;
  Tokenizer tokenizer = Tokenizer::load(path);
  LoadedModel model = load_model(model_dir, expert_values);
  if (tokenizer.vocab_size() > model.params->dims().vocab) {
    throw Error(
        cat("has ", tokenizer.vocab_size(), " tokens, more than the model's ", model.params->dims().vocab))
        .file(path);
  }
  return {std::move(model), std::move(tokenizer), path};
}

}  // namespace zaya::cli
