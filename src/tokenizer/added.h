#pragma once
// tokenizers' AddedVocabulary: tokens listed in tokenizer.json's "added_tokens" that are cut out of the text
// before the model sees it. Tokens with normalized=false are matched in the raw input, the others in the
// normalized text; a match is leftmost-longest, and single_word / lstrip / rstrip behave as in tokenizers.
// Internal to src/data.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tokenizer/bpe_model.h"

namespace zaya::tok {

class JsonField;
class Normalizer;

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
  bool operator==(const AddedToken&) const = default;
};

// The entries of "added_tokens", in file order. Missing flags default as tokenizers' AddedToken::from:
// special false, normalized = !special, the others false.
std::vector<AddedToken> parse_added_tokens(const JsonField& json);

// A part of the text: an added token (id >= 0) or the text between added tokens (id -1).
struct AddedSplit {
  size_t begin, end;
  int32_t id;
};

class AddedVocabulary {
 public:
  AddedVocabulary();
  AddedVocabulary(AddedVocabulary&&) noexcept;
  AddedVocabulary& operator=(AddedVocabulary&&) noexcept;
  ~AddedVocabulary();

  // tokenizers' add_tokens over the file's list: a content already known (to this vocabulary, then the model)
  // keeps its id, others take ids from the model's vocabulary size upwards; the ids written in the file are
  // not read, as in tokenizers. Throws Error (without file) when two tokens match the same text.
  void add(const std::vector<AddedToken>& tokens, const BpeModel& model, const Normalizer* normalizer);

  // Covers `text` with added-token matches and the text between them (appended to out, in order). An empty
  // text gives one empty text split. `normalized` selects the tokens matched against normalized text.
  void split(std::string_view text, bool normalized, std::vector<AddedSplit>& out) const;

  std::optional<int32_t> id_of(std::string_view content) const;
  // The string an id decodes to: its content, or for a normalized token its normalized content
  // (tokenizers' simple_id_to_token); nullptr for an id that is not an added token.
  const std::string* decoded(int32_t id) const;
  bool is_special(std::string_view token) const { return specials_.count(std::string(token)) > 0; }
  // Added tokens by id.
  const std::map<int32_t, AddedToken>& tokens() const { return by_id_; }

 private:
  class Trie;

  std::map<int32_t, AddedToken> by_id_;
  std::unordered_map<std::string, int32_t> ids_;  // content -> id
  std::unordered_map<int32_t, std::string> normalized_forms_;
  std::unordered_set<std::string> specials_;
  std::unique_ptr<Trie> raw_, normalized_;
};

}  // namespace zaya::tok
