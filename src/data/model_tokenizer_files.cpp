#include "data/model_tokenizer_files.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "tokenizer/tokenizer.h"

namespace zaya {

void write_model_tokenizer(const std::string& model_dir, const std::string& tokenizer_json,
                           int64_t model_max_length) {
  namespace fs = std::filesystem;
  const std::string text = read_text_file(tokenizer_json);
  const Tokenizer tokenizer = Tokenizer::parse(text, tokenizer_json);
  const fs::path beside = fs::path(tokenizer_json).parent_path() / "tokenizer_config.json";
  std::string config;
  if (fs::is_regular_file(beside)) {
    config = read_text_file(beside.string());
  } else {
    nlohmann::json made = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                           {"model_max_length", model_max_length},
                           {"clean_up_tokenization_spaces", false}};
    const std::pair<const char*, std::optional<int32_t>> specials[] = {{"bos_token", tokenizer.bos_id()},
                                                                       {"eos_token", tokenizer.eos_id()},
                                                                       {"pad_token", tokenizer.pad_id()}};
    for (const auto& [name, id] : specials) {
      if (id) made[name] = tokenizer.id_to_token(*id).value_or("");
    }
    config = made.dump(2) + "\n";
  }
  write_file_atomic((fs::path(model_dir) / "tokenizer.json").string(), text);
  write_file_atomic((fs::path(model_dir) / "tokenizer_config.json").string(), config);
}

}  // namespace zaya
