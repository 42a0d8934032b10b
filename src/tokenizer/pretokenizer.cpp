#include "tokenizer/pretokenizer.h"

#include "tokenizer/bpe_byte_level.h"
#include "tokenizer/json.h"
#include "tokenizer/unicode_text.h"

namespace zaya::tok {
namespace {

// Cuts `piece` at `ranges` and appends the non-empty pieces (tokenizers drops empty splits).
void append_slices(const Piece& piece, const std::vector<Range>& ranges, std::vector<Piece>& out) {
  for (const Range& range : ranges) {
    if (range.end > range.begin) out.push_back(slice(piece, range.begin, range.end));
  }
}

// The piece `from` became once rewritten into ws.text, which is copied into the arena.
Piece stored(const Piece& from, size_t origin_len, Workspace& ws) {
  return {ws.arena.store(ws.text), from.at_origin, origin_len};
}

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {}

  void pre_tokenize(const Piece& piece, std::vector<Piece>& out, Workspace& ws) const override {
    Piece text = piece;
    if (add_prefix_space_ && text.text.front() != ' ') {
      ws.text.clear();
      ws.text.push_back(' ');
      ws.text.append(text.text);
      text = stored(piece, piece.origin_len > 0 ? piece.origin_len + 1 : 0, ws);
    }
    if (!use_regex_) {
      map_bytes(text, out, ws);
      return;
    }
    ws.matches.clear();
    ws.ranges.clear();
    gpt2_pattern().find_matches(text.text, ws.matches);
    split_ranges(ws.matches, SplitBehavior::isolated, ws.ranges);
    for (const Range& range : ws.ranges) {
      if (range.end > range.begin) map_bytes(slice(text, range.begin, range.end), out, ws);
    }
  }

 private:
  static const TextPattern& gpt2_pattern() {
    static const TextPattern pattern = TextPattern::regex(kGpt2Pattern);
    return pattern;
  }

  static void map_bytes(const Piece& piece, std::vector<Piece>& out, Workspace& ws) {
    const ByteLevelAlphabet& alphabet = ByteLevelAlphabet::get();
    ws.text.clear();
    alphabet.map(piece.text.substr(0, piece.origin_len), ws.text);
    const size_t origin_len = ws.text.size();
    alphabet.map(piece.text.substr(piece.origin_len), ws.text);
    out.push_back(stored(piece, origin_len, ws));
  }

  bool add_prefix_space_, use_regex_;
};

class Split final : public PreTokenizer {
 public:
  Split(TextPattern pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}

  void pre_tokenize(const Piece& piece, std::vector<Piece>& out, Workspace& ws) const override {
    ws.matches.clear();
    ws.ranges.clear();
    pattern_.find_matches(piece.text, ws.matches);
    if (invert_) {
      for (Match& m : ws.matches) m.is_match = !m.is_match;
    }
    split_ranges(ws.matches, behavior_, ws.ranges);
    append_slices(piece, ws.ranges, out);
  }

 private:
  TextPattern pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class Metaspace final : public PreTokenizer {
 public:
  explicit Metaspace(MetaspaceOptions options) : options_(options) {
    unicode::append_utf8(replacement_, options.replacement);
  }

  void pre_tokenize(const Piece& piece, std::vector<Piece>& out, Workspace& ws) const override {
    ws.text.clear();
    size_t origin_len = 0;
    for (size_t at = 0; at < piece.text.size(); ++at) {
      if (at == piece.origin_len) origin_len = ws.text.size();
      if (piece.text[at] == ' ') {
        ws.text += replacement_;
      } else {
        ws.text.push_back(piece.text[at]);
      }
    }
    if (piece.origin_len >= piece.text.size()) origin_len = ws.text.size();
    const bool starts_with_replacement = ws.text.compare(0, replacement_.size(), replacement_) == 0;
    const bool prepend =
        !starts_with_replacement && (options_.prepend_scheme == PrependScheme::always ||
                                     (options_.prepend_scheme == PrependScheme::first && piece.at_origin));
    if (prepend) {
      ws.text.insert(0, replacement_);
      if (origin_len > 0) origin_len += replacement_.size();
    }
    const Piece text = stored(piece, origin_len, ws);
    if (!options_.split) {
      out.push_back(text);
      return;
    }
    ws.matches.clear();
    ws.ranges.clear();
    find_char_matches(text.text, options_.replacement, ws.matches);
    split_ranges(ws.matches, SplitBehavior::merged_with_next, ws.ranges);
    append_slices(text, ws.ranges, out);
  }

 private:
  MetaspaceOptions options_;
  std::string replacement_;
};

class Digits final : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}

  void pre_tokenize(const Piece& piece, std::vector<Piece>& out, Workspace& ws) const override {
    ws.matches.clear();
    ws.ranges.clear();
    find_numeric_matches(piece.text, ws.matches);
    split_ranges(ws.matches, individual_ ? SplitBehavior::isolated : SplitBehavior::contiguous, ws.ranges);
    append_slices(piece, ws.ranges, out);
  }

 private:
  bool individual_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {}

  void pre_tokenize(const Piece& piece, std::vector<Piece>& out, Workspace& ws) const override {
    if (steps_.empty()) {
      out.push_back(piece);
      return;
    }
    std::vector<Piece>* current = &ws.acquire_pieces();
    std::vector<Piece>* next = &ws.acquire_pieces();
    current->push_back(piece);
    for (size_t s = 0; s < steps_.size(); ++s) {
      std::vector<Piece>& target = s + 1 == steps_.size() ? out : *next;
      if (&target == next) next->clear();
      for (const Piece& p : *current) steps_[s]->pre_tokenize(p, target, ws);
      std::swap(current, next);
    }
    ws.release_pieces();
    ws.release_pieces();
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
};

SplitBehavior parse_behavior(const JsonField& json) {
  const std::string name = json.string();
  if (name == "Removed") return SplitBehavior::removed;
  if (name == "Isolated") return SplitBehavior::isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (name == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (name == "Contiguous") return SplitBehavior::contiguous;
  json.fail(cat("unknown split behavior \"", name, "\""));
}

}  // namespace

MetaspaceOptions parse_metaspace(const JsonField& json) {
  MetaspaceOptions options;
  options.replacement = json["replacement"].character();
  const JsonField scheme = json["prepend_scheme"];
  if (!scheme.is_null()) {
    const std::string name = scheme.string();
    if (name == "always") {
      options.prepend_scheme = PrependScheme::always;
    } else if (name == "first") {
      options.prepend_scheme = PrependScheme::first;
    } else if (name == "never") {
      options.prepend_scheme = PrependScheme::never;
    } else {
      scheme.fail(cat("unknown prepend scheme \"", name, "\""));
    }
  }
  // Files from before prepend_scheme say add_prefix_space; false must agree with the scheme (which
  // defaults to "always"), as tokenizers requires.
  const JsonField legacy = json["add_prefix_space"];
  if (!legacy.is_null() && !legacy.boolean(true)) {
    if (options.prepend_scheme != PrependScheme::never) {
      legacy.fail("add_prefix_space does not match declared prepend_scheme");
    }
  }
  options.split = json["split"].boolean(true);
  return options;
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const JsonField& json) {
  if (json.is_null()) return nullptr;
  const std::string type = json.type();
  if (type == "Sequence") {
    return std::make_unique<Sequence>(
        parse_steps<PreTokenizer>(json, "pretokenizers", "a pre-tokenizer", parse_pre_tokenizer));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevel>(json["add_prefix_space"].boolean(true),
                                       json["use_regex"].boolean(true));
  }
  if (type == "Split") {
    return std::make_unique<Split>(parse_text_pattern(json["pattern"]), parse_behavior(json["behavior"]),
                                   json["invert"].boolean(false));
  }
  if (type == "Metaspace") return std::make_unique<Metaspace>(parse_metaspace(json));
  if (type == "Digits") return std::make_unique<Digits>(json["individual_digits"].boolean(false));
  json["type"].unsupported(type);
}

}  // namespace zaya::tok
