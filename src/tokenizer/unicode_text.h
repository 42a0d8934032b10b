#pragma once
// UTF-8 and Unicode helpers of the tokenizer. Where Hugging Face tokenizers leans on Rust's standard
// library (str validity, char::is_whitespace, char::to_lowercase, String::from_utf8_lossy) these follow
// Rust's definitions, so that text is transformed byte for byte as there.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace zaya::unicode {

inline constexpr size_t npos = static_cast<size_t>(-1);

// Offset of the first byte that does not begin a valid UTF-8 sequence (overlong forms, surrogates and code
// points above U+10FFFF are invalid, as in Rust's str), or npos when all of `text` is valid.
size_t find_invalid_utf8(std::string_view text);

// Bytes in the sequence led by `lead`; the input is valid UTF-8.
inline size_t sequence_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// The code point starting at text[at]; `text` is valid UTF-8 and `at` a character boundary.
char32_t decode_at(std::string_view text, size_t at);
// The code point ending at text[end - 1], with its first byte written to *begin.
char32_t decode_before(std::string_view text, size_t end, size_t* begin);
void append_utf8(std::string& out, char32_t c);

// Unicode White_Space (Rust's char::is_whitespace and the regex crate's \s).
bool is_white_space(char32_t c);
// General category Nd, Nl or No (Rust's char::is_numeric).
bool is_numeric(char32_t c);
// General category L* or N*: never whitespace in any regex dialect.
bool is_letter_or_number(char32_t c);
// Canonical combining class 0.
bool is_starter(char32_t c);

// Rust's String::from_utf8_lossy: each maximal prefix of an invalid sequence becomes one U+FFFD.
std::string from_utf8_lossy(std::string_view bytes);

enum class NormalForm { nfc, nfd, nfkc, nfkd };
// Unicode normalization of valid UTF-8 `in` into `out` (replaced).
void normalize(std::string_view in, NormalForm form, std::string& out);
// Rust's char::to_lowercase applied to every character (no context rules such as a final sigma).
void to_lowercase(std::string_view in, std::string& out);

}  // namespace zaya::unicode
