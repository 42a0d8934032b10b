#include "tokenizer/bpe_byte_level.h"

#include "tokenizer/unicode_text.h"

namespace zaya::tok {
namespace {

bool stands_for_itself(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
}

}  // namespace

const ByteLevelAlphabet& ByteLevelAlphabet::get() {
  static const ByteLevelAlphabet alphabet;
  return alphabet;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  byte_of_.fill(-1);
  char32_t next_shifted = 256;
  for (int b = 0; b < 256; ++b) {
    const char32_t c = stands_for_itself(b) ? char32_t(b) : next_shifted++;
    std::string utf8;
    unicode::append_utf8(utf8, c);
    lengths_[b] = static_cast<uint8_t>(utf8.size());
    for (size_t k = 0; k < utf8.size(); ++k) chars_[b][k] = utf8[k];
    byte_of_[c] = static_cast<int16_t>(b);
  }
}

void ByteLevelAlphabet::map(std::string_view bytes, std::string& out) const {
  // Sized for two bytes per character up front, trimmed after: no append call per byte.
  const size_t start = out.size();
  out.resize(start + 2 * bytes.size());
  char* cursor = out.data() + start;
  for (const char byte : bytes) {
    const auto b = static_cast<uint8_t>(byte);
    cursor[0] = chars_[b][0];
    cursor[1] = chars_[b][1];
    cursor += lengths_[b];
  }
  out.resize(static_cast<size_t>(cursor - out.data()));
}

}  // namespace zaya::tok
