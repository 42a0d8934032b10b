#pragma once
// tokenizers' BPE model: a word (one pre-token) is cut into characters that are looked up in the
// vocabulary (with continuing_subword_prefix / end_of_word_suffix, byte fallback to <0xXX> tokens, and the
// unknown token, fused or not), then adjacent symbols are merged lowest merge rank first, leftmost first,
// until no merge applies. Internal to src/data.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/bpe_token_table.h"

namespace zaya::tok {

class JsonField;

struct BpeOptions {
  std::optional<std::string> unk_token;
  std::optional<std::string> continuing_subword_prefix;
  std::optional<std::string> end_of_word_suffix;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;  // a word that is itself in the vocabulary is one token, merges or not
};

class BpeModel {
 public:
  using Merge = std::pair<std::string, std::string>;
  // Thrown by the constructor for a merge whose tokens (or their concatenation) are not in the vocabulary.
  struct BadMerge {
    size_t rank;
    std::string message;
  };
  // `vocab` in file order, `merges` in rank order.
  BpeModel(std::vector<std::pair<std::string, int32_t>> vocab, const std::vector<Merge>& merges,
           BpeOptions options);
  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of one pre-tokenized word. Const and thread-safe; words are cached per thread.
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;
  // tokenizers' BPE::get_vocab_size: the number of vocabulary entries.
  size_t vocab_entries() const { return vocab_.size(); }
  int32_t max_id() const { return max_id_; }

 private:
  class PairTable;
  struct Scratch;

  // The symbols of `word` before any merge, as tokenizers' BPE::merge_word builds them.
  void initial_symbols(std::string_view word, Scratch& scratch) const;
  // tokenizers' Word::merge_all without dropout.
  void merge_symbols(Scratch& scratch) const;
  // Appends the ids of `word` after all merges (no ignore_merges lookup), through the cache.
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t unk_id() const;

  uint64_t id_;  // names this model's entries in the per-thread word caches
  TokenTable vocab_;
  std::unordered_map<int32_t, std::string> tokens_;  // id -> token, the first token of the file with that id
  int32_t max_id_ = -1;
  BpeOptions options_;
  std::unique_ptr<PairTable> merges_;    // (left id, right id) -> (rank, merged id)
  std::vector<int32_t> plain_char_ids_;  // id of each code point below U+0800 standing alone, -1 if none
  std::vector<int32_t> byte_ids_;        // id of <0xXX> for each byte, -1 if none
  // SentencePiece-style words ("▁" where the text had a space) are merged piece by piece, each piece starting
  // at a "▁" that follows another character, when no merge can join across such a point: no merge has a
  // right part starting with "▁" and a left part ending with something else, and neither a subword prefix
  // nor a suffix makes a character's token depend on its place in the word. The ids are the same; the
  // pieces are short enough to be cached, which whole texts (Gemma splits nothing) are not.
  bool merge_by_piece_ = false;
};

struct TokenizerDocument;
// The model described by `json` (tokenizer.json's "model"), whose vocab and merges the document holds; they
// are moved out of it.
BpeModel parse_bpe_model(const JsonField& json, TokenizerDocument& document);

}  // namespace zaya::tok
