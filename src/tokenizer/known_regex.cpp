#include "tokenizer/known_regex.h"

#include <oniguruma.h>

#include <array>

#include "tokenizer/unicode_text.h"

namespace zaya::tok {
namespace {

constexpr std::string_view kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum : uint8_t { kLetter = 1, kNumber = 2, kSpace = 4 };

// \p{L}, \p{N} and \s as Oniguruma's UTF-8 encoding defines them, tabulated for the BMP.
class CharClasses {
 public:
  CharClasses() {
    OnigEncoding encoding = ONIG_ENCODING_UTF8;
    OnigUChar letter[] = "L", number[] = "N";
    letter_ = ONIGENC_PROPERTY_NAME_TO_CTYPE(encoding, letter, letter + 1);
    number_ = ONIGENC_PROPERTY_NAME_TO_CTYPE(encoding, number, number + 1);
    for (char32_t c = 0; c < bmp_.size(); ++c) bmp_[c] = compute(c);
  }

  uint8_t of(char32_t c) const { return c < bmp_.size() ? bmp_[c] : compute(c); }

 private:
  uint8_t compute(char32_t c) const {
    OnigEncoding encoding = ONIG_ENCODING_UTF8;
    uint8_t out = 0;
    if (ONIGENC_IS_CODE_CTYPE(encoding, c, static_cast<OnigCtype>(letter_))) out |= kLetter;
    if (ONIGENC_IS_CODE_CTYPE(encoding, c, static_cast<OnigCtype>(number_))) out |= kNumber;
    if (ONIGENC_IS_CODE_CTYPE(encoding, c, ONIGENC_CTYPE_SPACE)) out |= kSpace;
    return out;
  }

  int letter_ = 0, number_ = 0;
  std::array<uint8_t, 0x10000> bmp_{};
};

const CharClasses& char_classes() {
  static const CharClasses classes;
  return classes;
}

bool is_other(uint8_t classes) {
  return (classes & (kLetter | kNumber | kSpace)) == 0;
}

// Reads characters of valid UTF-8 text.
struct Reader {
  std::string_view text;
  const CharClasses& classes;

  char32_t at(size_t i) const { return unicode::decode_at(text, i); }
  size_t length(size_t i) const { return unicode::sequence_length(static_cast<unsigned char>(text[i])); }
  uint8_t classes_at(size_t i) const { return classes.of(at(i)); }
  // End of the run of characters from i that have any of `mask`, stopping after `limit` characters.
  size_t run(size_t i, uint8_t mask, size_t limit = ~size_t(0)) const {
    for (size_t n = 0; n < limit && i < text.size() && (classes_at(i) & mask); ++n) i += length(i);
    return i;
  }
  size_t run_other(size_t i) const {
    while (i < text.size() && is_other(classes_at(i))) i += length(i);
    return i;
  }
};

// A letter of the contractions: exactly, or under Oniguruma's case folding (where U+017F folds to 's').
bool contraction_letter(char32_t c, char lower, bool case_insensitive) {
  if (c == char32_t(lower)) return true;
  if (!case_insensitive) return false;
  return c == char32_t(lower - 'a' + 'A') || (lower == 's' && c == 0x17F);
}

}  // namespace

KnownRegex::KnownRegex(Dialect dialect) : dialect_(dialect) {
  char_classes();
}

std::unique_ptr<KnownRegex> KnownRegex::recognize(std::string_view pattern) {
  if (pattern == kGpt2) return std::unique_ptr<KnownRegex>(new KnownRegex({false, false, 0, false}));
  if (pattern == kLlama3) return std::unique_ptr<KnownRegex>(new KnownRegex({true, true, 3, true}));
  if (pattern == kQwen2) return std::unique_ptr<KnownRegex>(new KnownRegex({true, true, 1, true}));
  return nullptr;
}

void KnownRegex::find_all(std::string_view text, std::vector<Range>& out) const {
  for (size_t at = 0; at < text.size();) {
    const size_t end = match_end(text, at);
    out.push_back({at, end});
    at = end;
  }
}

// The end of the match starting at `at`: the alternatives are tried in the pattern's order, each as
// Oniguruma's backtracking would settle it.
size_t KnownRegex::match_end(std::string_view text, size_t at) const {
  const Reader r{text, char_classes()};
  const size_t n = text.size();
  const char32_t c0 = r.at(at);
  const uint8_t k0 = r.classes.of(c0);
  const size_t next = at + r.length(at);
  const char32_t c1 = next < n ? r.at(next) : 0;
  const uint8_t k1 = next < n ? r.classes.of(c1) : 0;

  // 's|'t|'re|'ve|'m|'ll|'d
  if (c0 == '\'' && next < n) {
    const bool ci = dialect_.case_insensitive_contractions;
    const auto is = [&](char32_t c, char lower) { return contraction_letter(c, lower, ci); };
    if (is(c1, 's') || is(c1, 't') || is(c1, 'm') || is(c1, 'd')) return next + r.length(next);
    const size_t third = next + r.length(next);
    if (third < n) {
      const char32_t c2 = r.at(third);
      if ((is(c1, 'r') && is(c2, 'e')) || (is(c1, 'v') && is(c2, 'e')) || (is(c1, 'l') && is(c2, 'l'))) {
        return third + r.length(third);
      }
    }
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+  or   ?\p{L}+
  const bool prefix =
      dialect_.any_letter_prefix ? c0 != '\r' && c0 != '\n' && !(k0 & (kLetter | kNumber)) : c0 == ' ';
  if (prefix && (k1 & kLetter)) return r.run(next, kLetter);
  if (k0 & kLetter) return r.run(at, kLetter);
  // \p{N}{1,k}  or   ?\p{N}+
  if (dialect_.max_digits > 0) {
    if (k0 & kNumber) return r.run(at, kNumber, dialect_.max_digits);
  } else {
    if (c0 == ' ' && (k1 & kNumber)) return r.run(next, kNumber);
    if (k0 & kNumber) return r.run(at, kNumber);
  }
  //  ?[^\s\p{L}\p{N}]+ (then [\r\n]*)
  size_t end = 0;
  if (c0 == ' ' && next < n && is_other(k1)) {
    end = r.run_other(next);
  } else if (is_other(k0)) {
    end = r.run_other(at);
  }
  if (end > 0) {
    if (dialect_.line_breaks) {
      while (end < n && (text[end] == '\r' || text[end] == '\n')) ++end;
    }
    return end;
  }
  // Whitespace: \s*[\r\n]+, then \s+(?!\S), then \s+.
  const size_t space_end = r.run(at, kSpace);
  if (dialect_.line_breaks) {
    for (size_t i = space_end; i > at; --i) {
      if (text[i - 1] == '\r' || text[i - 1] == '\n') return i;
    }
  }
  if (space_end == n) return space_end;
  size_t last = 0;
  unicode::decode_before(text, space_end, &last);
  return last > at ? last : space_end;
}

}  // namespace zaya::tok
