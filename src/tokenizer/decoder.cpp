#include "tokenizer/decoder.h"

#include <optional>

#include "tokenizer/bpe_byte_level.h"
#include "tokenizer/json.h"
#include "tokenizer/pattern.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/unicode_text.h"

namespace zaya::tok {
namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";

class ByteLevel final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
    std::string bytes;
    for (const std::string& token : tokens) {
      // A token made only of alphabet characters stands for their bytes; any other token for itself.
      const size_t start = bytes.size();
      bool all_mapped = true;
      for (size_t at = 0; at < token.size() && all_mapped;) {
        const auto b = alphabet.byte_of(unicode::decode_at(token, at));
        if (b) {
          bytes.push_back(static_cast<char>(*b));
        } else {
          all_mapped = false;
        }
        at += unicode::sequence_length(static_cast<unsigned char>(token[at]));
      }
      if (!all_mapped) {
        bytes.resize(start);
        bytes += token;
      }
    }
    tokens.assign(1, unicode::from_utf8_lossy(bytes));
  }
};

class Replace final : public Decoder {
 public:
  Replace(TextPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}

  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<Match> matches;
    for (std::string& token : tokens) {
      matches.clear();
      pattern_.find_matches(token, matches);
      std::string replaced;
      for (const Match& m : matches) {
        if (m.is_match) {
          replaced += content_;
        } else {
          replaced.append(token, m.begin, m.end - m.begin);
        }
      }
      token = std::move(replaced);
    }
  }

 private:
  TextPattern pattern_;
  std::string content_;
};

// Rust's u8::from_str_radix(text, 16): an optional '+', then hex digits.
std::optional<uint8_t> parse_hex_byte(std::string_view text) {
  if (!text.empty() && text[0] == '+') text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  unsigned value = 0;
  for (const char c : text) {
    unsigned digit;
    if (c >= '0' && c <= '9') {
      digit = unsigned(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      digit = unsigned(c - 'a' + 10);
    } else if (c >= 'A' && c <= 'F') {
      digit = unsigned(c - 'A' + 10);
    } else {
      return std::nullopt;
    }
    value = value * 16 + digit;
  }
  return static_cast<uint8_t>(value);
}

class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;  // bytes of consecutive <0xXX> tokens
    const auto flush = [&] {
      if (pending.empty()) return;
      if (unicode::find_invalid_utf8(pending) == unicode::npos) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(kReplacementCharacter);
      }
      pending.clear();
    };
    for (std::string& token : tokens) {
      std::optional<uint8_t> byte;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token.back() == '>') {
        byte = parse_hex_byte(std::string_view(token).substr(3, 2));
      }
      if (byte) {
        pending.push_back(static_cast<char>(*byte));
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const std::string& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
};

class Strip final : public Decoder {
 public:
  Strip(char32_t content, uint64_t start, uint64_t stop) : content_(content), start_(start), stop_(stop) {}

  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      // Up to start_ leading and stop_ trailing `content` characters are cut. tokenizers panics where the
      // two cuts cross; here they meet and leave an empty token.
      size_t begin = 0, end = token.size();
      for (uint64_t i = 0; i < start_ && begin < end; ++i) {
        if (unicode::decode_at(token, begin) != content_) break;
        begin += unicode::sequence_length(static_cast<unsigned char>(token[begin]));
      }
      for (uint64_t i = 0; i < stop_ && end > begin; ++i) {
        size_t char_begin = 0;
        if (unicode::decode_before(token, end, &char_begin) != content_) break;
        end = char_begin;
      }
      token = token.substr(begin, end - begin);
    }
  }

 private:
  char32_t content_;
  uint64_t start_, stop_;
};

class Metaspace final : public Decoder {
 public:
  explicit Metaspace(MetaspaceOptions options) : options_(options) {}

  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      // In the first token every replacement character goes (the prepended one and any other).
      const bool drop = i == 0 && options_.prepend_scheme != PrependScheme::never;
      std::string out;
      const std::string& token = tokens[i];
      for (size_t at = 0; at < token.size();) {
        const size_t length = unicode::sequence_length(static_cast<unsigned char>(token[at]));
        if (unicode::decode_at(token, at) == options_.replacement) {
          if (!drop) out.push_back(' ');
        } else {
          out.append(token, at, length);
        }
        at += length;
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  MetaspaceOptions options_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}

  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& step : steps_) step->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

std::unique_ptr<Decoder> parse_decoder(const JsonField& json) {
  if (json.is_null()) return nullptr;
  const std::string type = json.type();
  if (type == "Sequence") {
    return std::make_unique<Sequence>(parse_steps<Decoder>(json, "decoders", "a decoder", parse_decoder));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (type == "Replace") {
    return std::make_unique<Replace>(parse_text_pattern(json["pattern"]), json["content"].string());
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (type == "Fuse") return std::make_unique<Fuse>();
  if (type == "Strip") {
    return std::make_unique<Strip>(json["content"].character(), json["start"].unsigned_integer(),
                                   json["stop"].unsigned_integer());
  }
  if (type == "Metaspace") return std::make_unique<Metaspace>(parse_metaspace(json));
  json["type"].unsupported(type);
}

}  // namespace zaya::tok
