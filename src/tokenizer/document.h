#pragma once
// tokenizer.json read in one pass. The BPE vocabulary and merges, nearly all of a large file (Gemma 3: 262k
// tokens, over 500k merges), go straight into vectors; building and then freeing as many small JSON values
// would be most of the load time. Everything else becomes a JSON document. Internal to src/data.

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace zaya::tok {

struct TokenizerDocument {
  nlohmann::json root;  // the file without model.vocab and model.merges
  // model.vocab in file order, ids checked to be 0 .. 2^31 - 1; nullopt when the file has none.
  std::optional<std::vector<std::pair<std::string, int32_t>>> vocab;
  // model.merges as (left, right), from ["left", "right"] or "left right" entries ("#version" lines of the
  // legacy form dropped), with each one's index in the file's list; nullopt when the file has none.
  std::optional<std::vector<std::pair<std::string, std::string>>> merges;
  std::vector<size_t> merge_index;
};

// Throws Error naming `source`, and the field for a malformed vocabulary entry or merge.
TokenizerDocument read_tokenizer_document(std::string_view text, const std::string& source);

}  // namespace zaya::tok
