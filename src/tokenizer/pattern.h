#pragma once
// Finding pattern matches in text and cutting text at them, as tokenizers' `Pattern` and
// `NormalizedString::split` do. Regexes are Oniguruma's (tokenizers uses the same library, with its default
// syntax and UTF-8), so patterns such as GPT-2's or Llama-3's with \p{L} and lookahead match identically.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct re_pattern_buffer;  // Oniguruma's regex_t

namespace zaya::tok {

class KnownRegex;

struct Range {
  size_t begin, end;
};

// One part of a text: a match of the pattern or the text between two matches.
struct Match {
  size_t begin, end;
  bool is_match;
};

// A compiled Oniguruma regex. Searching is const and thread-safe (each search has its own region).
class Regex {
 public:
  // Throws Error("invalid regex /.../: <Oniguruma's message>") without file context.
  explicit Regex(std::string_view pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Appends the non-overlapping matches of the onig crate's find_iter: leftmost first, each search starting
  // where the previous match ended, and an empty match right at the end of the previous match skipped.
  void find_all(std::string_view text, std::vector<Range>& out) const;
  // Whether the pattern matches starting at text[at] (anchored there, not searched for).
  bool matches_at(std::string_view text, size_t at) const;

 private:
  // Leftmost match starting at or after `from`; false when there is none.
  bool search(std::string_view text, size_t from, size_t* begin, size_t* end) const;

  re_pattern_buffer* regex_ = nullptr;
  std::string pattern_;
  std::unique_ptr<KnownRegex> known_;  // the same cuts without Oniguruma, for the common split regexes
};

// tokenizers' SplitPattern / ReplacePattern: a literal string or a regex. A literal is searched for directly
// (tokenizers compiles it as an escaped regex, which finds the same leftmost non-overlapping occurrences).
class TextPattern {
 public:
  static TextPattern literal(std::string text);
  static TextPattern regex(std::string_view pattern);  // throws Error like Regex

  // Covers all of `text` (appended to out) with matches and the gaps between them, in order; an empty text
  // gives one empty non-match.
  void find_matches(std::string_view text, std::vector<Match>& out) const;

 private:
  std::string literal_;
  std::shared_ptr<const Regex> regex_;
};

// Like TextPattern::find_matches with every character equal to `c` one match.
void find_char_matches(std::string_view text, char32_t c, std::vector<Match>& out);
// Every numeric character (Rust's char::is_numeric) one match.
void find_numeric_matches(std::string_view text, std::vector<Match>& out);

// tokenizers' SplitDelimiterBehavior.
enum class SplitBehavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// The ranges `matches` are cut into under `behavior`, in order (appended to out); may include empty ranges.
void split_ranges(const std::vector<Match>& matches, SplitBehavior behavior, std::vector<Range>& out);

}  // namespace zaya::tok
