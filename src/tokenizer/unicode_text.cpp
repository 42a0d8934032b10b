#include "tokenizer/unicode_text.h"

#include <utf8proc.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace zaya::unicode {
namespace {

constexpr uint64_t kHighBits = 0x8080808080808080ull;

// First index >= at whose byte is not ASCII (or text.size()).
size_t skip_ascii(std::string_view text, size_t at) {
  while (at + 8 <= text.size()) {
    uint64_t word;
    std::memcpy(&word, text.data() + at, 8);
    if (word & kHighBits) break;
    at += 8;
  }
  while (at < text.size() && static_cast<unsigned char>(text[at]) < 0x80) ++at;
  return at;
}

bool is_continuation(unsigned char b) {
  return (b & 0xC0) == 0x80;
}

// The accepted range of the second byte of a sequence led by `lead`, and the sequence length; length 0
// for a byte that cannot lead a sequence. The ranges exclude overlong forms, surrogates and > U+10FFFF.
struct LeadInfo {
  size_t length;
  unsigned char low, high;
};

LeadInfo lead_info(unsigned char lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return {2, 0x80, 0xBF};
  if (lead == 0xE0) return {3, 0xA0, 0xBF};
  if (lead == 0xED) return {3, 0x80, 0x9F};
  if (lead >= 0xE1 && lead <= 0xEF) return {3, 0x80, 0xBF};
  if (lead == 0xF0) return {4, 0x90, 0xBF};
  if (lead >= 0xF1 && lead <= 0xF3) return {4, 0x80, 0xBF};
  if (lead == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

// Length of the valid sequence at text[at] (a non-ASCII lead), or 0 with *valid_prefix set to the number of
// bytes that form the longest prefix of some valid sequence (at least 1).
size_t valid_sequence(std::string_view text, size_t at, size_t* valid_prefix) {
  const auto lead = static_cast<unsigned char>(text[at]);
  const LeadInfo info = lead_info(lead);
  *valid_prefix = 1;
  if (info.length == 0) return 0;
  if (at + 1 >= text.size()) return 0;
  const auto second = static_cast<unsigned char>(text[at + 1]);
  if (second < info.low || second > info.high) return 0;
  *valid_prefix = 2;
  for (size_t k = 2; k < info.length; ++k) {
    if (at + k >= text.size() || !is_continuation(static_cast<unsigned char>(text[at + k]))) return 0;
    *valid_prefix = k + 1;
  }
  return info.length;
}

utf8proc_option_t options_for(NormalForm form) {
  switch (form) {
    case NormalForm::nfc:
      return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    case NormalForm::nfd:
      return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    case NormalForm::nfkc:
      return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case NormalForm::nfkd:
      return utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
  }
  return utf8proc_option_t(0);
}

void append_normalized(std::string_view run, utf8proc_option_t options, std::string& out) {
  utf8proc_uint8_t* mapped = nullptr;
  const utf8proc_ssize_t length = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(run.data()),
                                               static_cast<utf8proc_ssize_t>(run.size()), &mapped, options);
  const std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owner(mapped, &std::free);
  if (length < 0) throw Error(cat("Unicode normalization failed: ", utf8proc_errmsg(length)));
  out.append(reinterpret_cast<const char*>(mapped), static_cast<size_t>(length));
}

}  // namespace

size_t find_invalid_utf8(std::string_view text) {
  size_t at = 0;
  while (true) {
    at = skip_ascii(text, at);
    if (at >= text.size()) return npos;
    size_t prefix = 0;
    const size_t length = valid_sequence(text, at, &prefix);
    if (length == 0) return at;
    at += length;
  }
}

char32_t decode_at(std::string_view text, size_t at) {
  const auto b0 = static_cast<unsigned char>(text[at]);
  if (b0 < 0x80) return b0;
  const auto cont = [&](size_t k) { return char32_t(static_cast<unsigned char>(text[at + k]) & 0x3F); };
  if (b0 < 0xE0) return (char32_t(b0 & 0x1F) << 6) | cont(1);
  if (b0 < 0xF0) return (char32_t(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
  return (char32_t(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
}

char32_t decode_before(std::string_view text, size_t end, size_t* begin) {
  size_t at = end - 1;
  while (at > 0 && is_continuation(static_cast<unsigned char>(text[at]))) --at;
  *begin = at;
  return decode_at(text, at);
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

bool is_white_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  switch (c) {
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  const utf8proc_category_t category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_ND || category == UTF8PROC_CATEGORY_NL ||
         category == UTF8PROC_CATEGORY_NO;
}

bool is_letter_or_number(char32_t c) {
  const utf8proc_category_t category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO) ||
         (category >= UTF8PROC_CATEGORY_ND && category <= UTF8PROC_CATEGORY_NO);
}

bool is_starter(char32_t c) {
  return c < 0x300 || utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class == 0;
}

std::string from_utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t at = 0;
  while (at < bytes.size()) {
    const size_t ascii_end = skip_ascii(bytes, at);
    out.append(bytes.substr(at, ascii_end - at));
    at = ascii_end;
    if (at >= bytes.size()) break;
    size_t prefix = 0;
    const size_t length = valid_sequence(bytes, at, &prefix);
    if (length > 0) {
      out.append(bytes.substr(at, length));
      at += length;
    } else {
      out.append("\xEF\xBF\xBD");
      at += prefix;
    }
  }
  return out;
}

void normalize(std::string_view in, NormalForm form, std::string& out) {
  // ASCII characters never compose with what precedes them and are unchanged by every form, so only the
  // non-ASCII runs (with the ASCII character before each, which may be a base for combining marks) go
  // through utf8proc.
  out.clear();
  out.reserve(in.size() + in.size() / 8);
  const utf8proc_option_t options = options_for(form);
  size_t at = 0;
  while (at < in.size()) {
    const size_t non_ascii = skip_ascii(in, at);
    if (non_ascii == in.size()) {
      out.append(in.substr(at));
      break;
    }
    const size_t run_begin = non_ascii > at ? non_ascii - 1 : non_ascii;
    out.append(in.substr(at, run_begin - at));
    size_t run_end = non_ascii;
    while (run_end < in.size() && static_cast<unsigned char>(in[run_end]) >= 0x80) ++run_end;
    append_normalized(in.substr(run_begin, run_end - run_begin), options, out);
    at = run_end;
  }
}

void to_lowercase(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  size_t at = 0;
  while (at < in.size()) {
    const auto byte = static_cast<unsigned char>(in[at]);
    if (byte < 0x80) {
      out.push_back(static_cast<char>(byte >= 'A' && byte <= 'Z' ? byte + 32 : byte));
      ++at;
      continue;
    }
    const char32_t c = decode_at(in, at);
    at += sequence_length(byte);
    if (c == 0x130) {
      out.append("i\xCC\x87");  // the one unconditional multi-character lowercase mapping (SpecialCasing)
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
}

}  // namespace zaya::unicode
