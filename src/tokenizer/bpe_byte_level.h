#pragma once
// GPT-2's byte-level alphabet: every byte is shown as one printable character, so that a BPE over
// characters is a BPE over bytes. Printable Latin-1 bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for
// themselves; the other 68 bytes map, in byte order, to U+0100 onwards.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zaya::tok {

// The regex GPT-2 (and tokenizers' ByteLevel pre-tokenizer with use_regex) splits text with.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelAlphabet {
 public:
  static const ByteLevelAlphabet& get();

  // The UTF-8 encoding of byte b's character (1 or 2 bytes).
  std::string_view char_of(uint8_t b) const { return {chars_[b].data(), lengths_[b]}; }
  // Appends the characters of `bytes` to out.
  void map(std::string_view bytes, std::string& out) const;
  // The byte shown by code point c, if c is one of the 256 characters.
  std::optional<uint8_t> byte_of(char32_t c) const {
    if (c >= byte_of_.size() || byte_of_[c] < 0) return std::nullopt;
    return static_cast<uint8_t>(byte_of_[c]);
  }

 private:
  ByteLevelAlphabet();

  std::array<std::array<char, 2>, 256> chars_{};
  std::array<uint8_t, 256> lengths_{};
  std::array<int16_t, 324> byte_of_{};  // code point -> byte, -1 where none; the alphabet ends at U+0143
};

}  // namespace zaya::tok
