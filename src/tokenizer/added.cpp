#include "tokenizer/added.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "tokenizer/json.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode_text.h"

namespace zaya::tok {
namespace {

// The regex crate's Unicode \w, which tokenizers' single_word test uses.
const Regex& word_character() {
  static const Regex regex(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])");
  return regex;
}

bool ends_with_word(std::string_view text, size_t end) {
  if (end == 0) return false;
  size_t begin = 0;
  unicode::decode_before(text, end, &begin);
  return word_character().matches_at(text.substr(0, end), begin);
}

bool starts_with_word(std::string_view text, size_t begin) {
  return begin < text.size() && word_character().matches_at(text, begin);
}

}  // namespace

// Byte trie of the patterns, answering "the longest pattern that starts here".
class AddedVocabulary::Trie {
 public:
  Trie() : nodes_(1) { can_start_.fill(false); }

  // False when the pattern is already present.
  bool insert(std::string_view pattern, int32_t id) {
    int32_t node = 0;
    for (const char c : pattern) {
      const auto byte = static_cast<unsigned char>(c);
      if (node == 0) can_start_[byte] = true;
      auto& edges = nodes_[node].edges;
      auto it = std::lower_bound(
          edges.begin(), edges.end(), byte,
          [](const std::pair<unsigned char, int32_t>& e, unsigned char b) { return e.first < b; });
      if (it == edges.end() || it->first != byte) {
        const auto child = static_cast<int32_t>(nodes_.size());
        it = edges.insert(it, {byte, child});
        nodes_.emplace_back();
      }
      node = it->second;
    }
    if (nodes_[node].id >= 0) return false;
    nodes_[node].id = id;
    return true;
  }

  // The leftmost match at or after `from`, longest at that position (daachorse's LeftmostLongest).
  bool find(std::string_view text, size_t from, size_t* begin, size_t* end, int32_t* id) const {
    for (size_t at = from; at < text.size(); ++at) {
      if (!can_start_[static_cast<unsigned char>(text[at])]) continue;
      int32_t node = 0;
      bool found = false;
      for (size_t k = at; k < text.size(); ++k) {
        const auto byte = static_cast<unsigned char>(text[k]);
        const auto& edges = nodes_[node].edges;
        const auto it = std::lower_bound(
            edges.begin(), edges.end(), byte,
            [](const std::pair<unsigned char, int32_t>& e, unsigned char b) { return e.first < b; });
        if (it == edges.end() || it->first != byte) break;
        node = it->second;
        if (nodes_[node].id >= 0) {
          found = true;
          *begin = at;
          *end = k + 1;
          *id = nodes_[node].id;
        }
      }
      if (found) return true;
    }
    return false;
  }

 private:
  struct Node {
    int32_t id = -1;
    std::vector<std::pair<unsigned char, int32_t>> edges;  // sorted by byte
  };
  std::vector<Node> nodes_;
  std::array<bool, 256> can_start_;
};

std::vector<AddedToken> parse_added_tokens(const JsonField& json) {
  std::vector<AddedToken> tokens;
  if (json.is_null()) return tokens;
  for (size_t i = 0; i < json.size(); ++i) {
    const JsonField entry = json.at(i);
    AddedToken token;
    token.content = entry["content"].string();
    token.special = entry["special"].boolean(false);
    token.single_word = entry["single_word"].boolean(false);
    token.lstrip = entry["lstrip"].boolean(false);
    token.rstrip = entry["rstrip"].boolean(false);
    token.normalized = entry["normalized"].boolean(!token.special);
    tokens.push_back(std::move(token));
  }
  return tokens;
}

AddedVocabulary::AddedVocabulary() = default;
AddedVocabulary::AddedVocabulary(AddedVocabulary&&) noexcept = default;
AddedVocabulary& AddedVocabulary::operator=(AddedVocabulary&&) noexcept = default;
AddedVocabulary::~AddedVocabulary() = default;

void AddedVocabulary::add(const std::vector<AddedToken>& tokens, const BpeModel& model,
                          const Normalizer* normalizer) {
  auto next_id = static_cast<int64_t>(model.vocab_entries());
  NormalizedText normalized;
  std::string scratch;
  for (const AddedToken& token : tokens) {
    if (token.content.empty()) continue;
    const auto known = ids_.find(token.content);
    if (known != ids_.end() && by_id_.at(known->second) == token) continue;
    int32_t id;
    if (known != ids_.end()) {
      id = known->second;
    } else if (const auto model_id = model.token_to_id(token.content)) {
      id = *model_id;
    } else {
      if (next_id > INT32_MAX) throw Error("too many added tokens");
      id = static_cast<int32_t>(next_id++);
    }
    if (token.normalized && normalizer) {
      normalized.text = token.content;
      normalized.origin_len = 0;
      normalizer->normalize(normalized, scratch);
      if (normalized.text != token.content) normalized_forms_[id] = normalized.text;
    }
    ids_[token.content] = id;
    if (token.special) specials_.insert(token.content);
    by_id_[id] = token;
  }

  raw_.reset();
  normalized_.reset();
  for (const auto& [id, token] : by_id_) {
    const auto form = normalized_forms_.find(id);
    const std::string& pattern =
        token.normalized && form != normalized_forms_.end() ? form->second : token.content;
    std::unique_ptr<Trie>& trie = token.normalized ? normalized_ : raw_;
    if (!trie) trie = std::make_unique<Trie>();
    if (pattern.empty()) throw Error(cat("added token \"", token.content, "\" normalizes to nothing"));
    if (!trie->insert(pattern, id)) {
      throw Error(cat("added token \"", token.content, "\" matches the same text as another added token"));
    }
  }
}

void AddedVocabulary::split(std::string_view text, bool normalized, std::vector<AddedSplit>& out) const {
  const Trie* trie = normalized ? normalized_.get() : raw_.get();
  if (text.empty() || !trie) {
    out.push_back({0, text.size(), -1});
    return;
  }
  size_t covered = 0;  // end of what has been handed out
  size_t from = 0;
  size_t begin = 0, end = 0;
  int32_t id = -1;
  while (trie->find(text, from, &begin, &end, &id)) {
    // The search resumes after the match itself, whatever the flags below make of it.
    from = end;
    const AddedToken& token = by_id_.at(id);
    if (token.single_word) {
      const bool space_before = begin == 0 || !ends_with_word(text, begin);
      const bool space_after = end == text.size() || !starts_with_word(text, end);
      if (!space_before || !space_after) continue;
    }
    size_t start = begin, stop = end;
    if (token.lstrip) {
      size_t first_space = start;
      while (first_space > 0) {
        size_t char_begin = 0;
        if (!unicode::is_white_space(unicode::decode_before(text, first_space, &char_begin))) break;
        first_space = char_begin;
      }
      // Spaces a previous token already took stay with it.
      start = std::max(first_space, covered);
    }
    if (token.rstrip) {
      while (stop < text.size() && unicode::is_white_space(unicode::decode_at(text, stop))) {
        stop += unicode::sequence_length(static_cast<unsigned char>(text[stop]));
      }
    }
    if (covered < start) out.push_back({covered, start, -1});
    out.push_back({start, stop, id});
    covered = stop;
  }
  if (covered != text.size()) out.push_back({covered, text.size(), -1});
}

std::optional<int32_t> AddedVocabulary::id_of(std::string_view content) const {
  const auto it = ids_.find(std::string(content));
  if (it == ids_.end()) return std::nullopt;
  return it->second;
}

const std::string* AddedVocabulary::decoded(int32_t id) const {
  const auto token = by_id_.find(id);
  if (token == by_id_.end()) return nullptr;
  const auto form = normalized_forms_.find(id);
  return form != normalized_forms_.end() ? &form->second : &token->second.content;
}

}  // namespace zaya::tok
