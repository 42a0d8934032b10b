#pragma once
// A model directory's tokenizer as transformers (and so lm-evaluation-harness, vLLM, SGLang) loads it:
// tokenizer.json, and tokenizer_config.json naming the tokenizer class and its special tokens. Without the
// latter AutoTokenizer picks the class that the model type maps to, for zaya a SentencePiece one that
// misreads a byte-level vocabulary, and finds no end-of-text token.

#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

// The files write_model_tokenizer writes.
inline const std::vector<std::string> kModelTokenizerFiles = {"tokenizer.json", "tokenizer_config.json"};

// Writes model_dir/tokenizer.json, a copy of tokenizer_json, and model_dir/tokenizer_config.json: a copy of
// the one beside tokenizer_json when there is one, else one made from the tokenizer's special tokens.
// Throws Error naming the file that cannot be read or parsed.
void write_model_tokenizer(const std::string& model_dir, const std::string& tokenizer_json,
                           int64_t model_max_length);

}  // namespace zaya
