// The hand-written matchers of the common split regexes against Oniguruma running the same regex, on
// random text built from the characters where the alternatives disagree most easily.

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "tokenizer/bpe_byte_level.h"
#include "tokenizer/known_regex.h"
#include "tokenizer/pattern.h"

namespace zaya::tok {
namespace {

// Pieces of the random texts, separated by '|': whitespace of every kind (\x0b, \x0c, U+0085 NEL, NBSP,
// U+3000, U+2028), contraction letters in both cases and U+017F (which folds to 's'), letters (Lt, Lm, CJK),
// numbers (Nd in other scripts, No, Nl), punctuation, emoji, a combining mark, ZWJ, U+180E and a BOM (not
// whitespace) and a mathematical letter outside the BMP.
constexpr std::string_view kPieces =
    " |  |\t|\n|\r|\r\n|\x0b|\x0c|\u0085|\u00a0|\u3000|\u2028|'|s|S|ſ|t|T|re|RE|ve|Ve|ll|lL|m|d|D|a|Z|é|ǅ|ʰ|"
    "中|ー|1|42|٣|½|Ⅻ|²|.|,|!|-|$|😀|\u0301|\u200d|_|\u180e|\ufeff|𝐀";

std::vector<std::string> pieces() {
  std::vector<std::string> out;
  for (size_t begin = 0; begin <= kPieces.size();) {
    const size_t end = std::min(kPieces.find('|', begin), kPieces.size());
    out.emplace_back(kPieces.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

std::string random_text(const std::vector<std::string>& parts, std::mt19937& rng) {
  std::uniform_int_distribution<size_t> length(0, 24), piece(0, parts.size() - 1);
  std::string text;
  for (size_t n = length(rng); n > 0; --n) text += parts[piece(rng)];
  return text;
}

void expect_same_as_oniguruma(std::string_view pattern) {
  const Regex fast{pattern};
  ASSERT_TRUE(KnownRegex::recognize(pattern)) << pattern;
  const Regex engine{"(?:" + std::string(pattern) + ")"};  // not recognized: Oniguruma runs it
  ASSERT_FALSE(KnownRegex::recognize("(?:" + std::string(pattern) + ")"));
  const std::vector<std::string> parts = pieces();
  ASSERT_EQ(parts.size(), 52u);
  std::mt19937 rng(7);
  std::vector<Range> want, got;
  for (int i = 0; i < 30000; ++i) {
    const std::string text = random_text(parts, rng);
    want.clear();
    got.clear();
    engine.find_all(text, want);
    fast.find_all(text, got);
    ASSERT_EQ(got.size(), want.size()) << "text \"" << text << "\"";
    for (size_t k = 0; k < got.size(); ++k) {
      ASSERT_TRUE(got[k].begin == want[k].begin && got[k].end == want[k].end)
          << "text \"" << text << "\" match " << k << ": got [" << got[k].begin << ", " << got[k].end
          << "), Oniguruma [" << want[k].begin << ", " << want[k].end << ")";
    }
  }
}

TEST(TokenizerRegex, Gpt2MatcherEqualsOniguruma) {
  expect_same_as_oniguruma(kGpt2Pattern);
}

TEST(TokenizerRegex, Llama3MatcherEqualsOniguruma) {
  expect_same_as_oniguruma(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
}

TEST(TokenizerRegex, Qwen2MatcherEqualsOniguruma) {
  expect_same_as_oniguruma(
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)");
}

TEST(TokenizerRegex, EmptyMatchesFollowTheOnigCrate) {
  // An empty match right where the previous match ended is skipped, one character on.
  const Regex regex("x*");
  std::vector<Range> matches;
  regex.find_all("axxb", matches);
  ASSERT_EQ(matches.size(), 3u);
  EXPECT_TRUE(matches[0].begin == 0 && matches[0].end == 0);
  EXPECT_TRUE(matches[1].begin == 1 && matches[1].end == 3);
  EXPECT_TRUE(matches[2].begin == 4 && matches[2].end == 4);  // the empty match at 3 touches "xx"
}

}  // namespace
}  // namespace zaya::tok
