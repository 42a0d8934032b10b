#pragma once
// Hand-written matchers for the split regexes nearly every byte-level tokenizer uses: GPT-2's, Llama-3's
// and Qwen2's. They cut text exactly where Oniguruma does (same alternation order, same backtracking
// outcome, Oniguruma's own Unicode tables for \p{L}, \p{N} and \s), at a fraction of the cost: Oniguruma
// allocates and copies its match stack on every search, that is on every pre-token. Internal to src/data.

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include "tokenizer/pattern.h"

namespace zaya::tok {

class KnownRegex {
 public:
  // A matcher when `pattern` is, character for character, one of the known regexes; otherwise nullptr.
  // Oniguruma must be initialized (a Regex compiled).
  static std::unique_ptr<KnownRegex> recognize(std::string_view pattern);

  // Appends what Regex::find_all appends. Every character starts a match of these patterns, so the matches
  // tile `text` (valid UTF-8).
  void find_all(std::string_view text, std::vector<Range>& out) const;

  // Which pattern, by its alternatives.
  struct Dialect {
    bool case_insensitive_contractions;  // (?i:'s|'t|...) rather than 's|'t|...
    bool any_letter_prefix;              // [^\r\n\p{L}\p{N}]?\p{L}+ rather than  ?\p{L}+
    size_t max_digits;                   // \p{N}{1,max_digits}; 0 for GPT-2's  ?\p{N}+
    bool line_breaks;                    // [\r\n]* after punctuation and an \s*[\r\n]+ alternative
  };

 private:
  explicit KnownRegex(Dialect dialect);
  size_t match_end(std::string_view text, size_t at) const;

  Dialect dialect_;
};

}  // namespace zaya::tok
