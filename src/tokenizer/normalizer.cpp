#include "tokenizer/normalizer.h"

#include <vector>

#include "tokenizer/json.h"
#include "tokenizer/unicode_text.h"

namespace zaya::tok {
namespace {

bool is_ascii(std::string_view text) {
  for (const char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(unicode::NormalForm form) : form_(form) {}

  void normalize(NormalizedText& text, std::string& scratch) const override {
    if (is_ascii(text.text)) return;
    if (text.origin_len > 0) {
      // The origin's characters are those of the first input character together with the combining marks
      // that follow it (composition and reordering keep them together).
      size_t end = text.origin_len;
      while (end < text.text.size() && !unicode::is_starter(unicode::decode_at(text.text, end))) {
        end += unicode::sequence_length(static_cast<unsigned char>(text.text[end]));
      }
      unicode::normalize(std::string_view(text.text).substr(0, end), form_, scratch);
      text.origin_len = scratch.size();
    }
    unicode::normalize(text.text, form_, scratch);
    text.text.swap(scratch);
    text.origin_len = std::min(text.origin_len, text.text.size());
  }

 private:
  unicode::NormalForm form_;
};

class Lowercase final : public Normalizer {
 public:
  void normalize(NormalizedText& text, std::string& scratch) const override {
    // Lowercasing maps character by character, so the origin is the lowercase of the origin's characters.
    if (text.origin_len > 0) {
      unicode::to_lowercase(std::string_view(text.text).substr(0, text.origin_len), scratch);
      text.origin_len = scratch.size();
    }
    unicode::to_lowercase(text.text, scratch);
    text.text.swap(scratch);
  }
};

class Replace final : public Normalizer {
 public:
  Replace(TextPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}

  void normalize(NormalizedText& text, std::string& scratch) const override {
    thread_local std::vector<Match> matches;
    matches.clear();
    pattern_.find_matches(text.text, matches);
    scratch.clear();
    // tokenizers aligns a replacement with the last byte of what it replaces (or with the start for an
    // empty match at offset 0); copied bytes keep their own alignment.
    size_t origin = 0;
    bool in_origin = true;
    for (const Match& m : matches) {
      if (m.is_match) {
        scratch += content_;
        const bool aligned_to_origin = m.end == 0 || m.end - 1 < text.origin_len;
        if (in_origin && aligned_to_origin) {
          origin += content_.size();
        } else if (!content_.empty()) {
          in_origin = false;
        }
      } else {
        scratch.append(text.text, m.begin, m.end - m.begin);
        if (in_origin) {
          if (m.begin < text.origin_len) origin += std::min(m.end, text.origin_len) - m.begin;
          if (m.end > text.origin_len) in_origin = false;
        }
      }
    }
    text.text.swap(scratch);
    text.origin_len = origin;
  }

 private:
  TextPattern pattern_;
  std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}

  void normalize(NormalizedText& text, std::string& /*scratch*/) const override {
    if (text.text.empty()) return;
    text.text.insert(0, prefix_);
    // The prefix is aligned with the first character.
    if (text.origin_len > 0) text.origin_len += prefix_.size();
  }

 private:
  std::string prefix_;
};

class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}

  void normalize(NormalizedText& text, std::string& /*scratch*/) const override {
    const std::string_view s = text.text;
    size_t begin = 0, end = s.size();
    if (left_) {
      while (begin < end && unicode::is_white_space(unicode::decode_at(s, begin))) {
        begin += unicode::sequence_length(static_cast<unsigned char>(s[begin]));
      }
    }
    if (right_) {
      while (end > begin) {
        size_t char_begin = 0;
        if (!unicode::is_white_space(unicode::decode_before(s, end, &char_begin))) break;
        end = char_begin;
      }
    }
    text.origin_len = text.origin_len > begin ? std::min(text.origin_len, end) - begin : 0;
    text.text = text.text.substr(begin, end - begin);
  }

 private:
  bool left_, right_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}

  void normalize(NormalizedText& text, std::string& scratch) const override {
    for (const auto& step : steps_) step->normalize(text, scratch);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const JsonField& json) {
  if (json.is_null()) return nullptr;
  const std::string type = json.type();
  if (type == "Sequence") {
    return std::make_unique<Sequence>(
        parse_steps<Normalizer>(json, "normalizers", "a normalizer", parse_normalizer));
  }
  if (type == "NFC") return std::make_unique<UnicodeForm>(unicode::NormalForm::nfc);
  if (type == "NFD") return std::make_unique<UnicodeForm>(unicode::NormalForm::nfd);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(unicode::NormalForm::nfkc);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(unicode::NormalForm::nfkd);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Replace") {
    return std::make_unique<Replace>(parse_text_pattern(json["pattern"]), json["content"].string());
  }
  if (type == "Prepend") return std::make_unique<Prepend>(json["prepend"].string());
  if (type == "Strip") {
    return std::make_unique<Strip>(json["strip_left"].boolean(false), json["strip_right"].boolean(false));
  }
  json["type"].unsupported(type);
}

}  // namespace zaya::tok
