#include "tokenizer/pattern.h"

#include <oniguruma.h>

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "tokenizer/known_regex.h"
#include "tokenizer/unicode_text.h"

namespace zaya::tok {
namespace {

std::string onig_message(int code, OnigErrorInfo* info) {
  OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
  if (info) {
    onig_error_code_to_str(message, code, info);
  } else {
    onig_error_code_to_str(message, code);
  }
  return reinterpret_cast<const char*>(message);
}

// One region per thread: searches on a shared regex_t are reentrant as long as their regions differ.
OnigRegion* thread_region() {
  struct Holder {
    OnigRegion* region = onig_region_new();
    ~Holder() { onig_region_free(region, 1); }
  };
  thread_local Holder holder;
  return holder.region;
}

const OnigUChar* bytes(std::string_view text) {
  return reinterpret_cast<const OnigUChar*>(text.data());
}

template <class Predicate>
void find_char_matches_if(std::string_view text, Predicate&& is_match, std::vector<Match>& out) {
  if (text.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  size_t last = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t length = unicode::sequence_length(static_cast<unsigned char>(text[at]));
    if (is_match(unicode::decode_at(text, at))) {
      if (last < at) out.push_back({last, at, false});
      out.push_back({at, at + length, true});
      last = at + length;
    }
    at += length;
  }
  if (last < text.size()) out.push_back({last, text.size(), false});
}

}  // namespace

Regex::Regex(std::string_view pattern) : pattern_(pattern) {
  // Compilation touches Oniguruma's global tables; the onig crate serializes it the same way.
  static std::mutex compile_mutex;
  const std::lock_guard<std::mutex> lock(compile_mutex);
  static const bool initialized = [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    return onig_initialize(encodings, 1) == ONIG_NORMAL;
  }();
  if (!initialized) throw Error("cannot initialize Oniguruma");
  OnigErrorInfo info;
  const int code = onig_new(&regex_, bytes(pattern_), bytes(pattern_) + pattern_.size(), ONIG_OPTION_NONE,
                            ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (code != ONIG_NORMAL) {
    regex_ = nullptr;
    throw Error(cat("invalid regex /", pattern_, "/: ", onig_message(code, &info)));
  }
  known_ = KnownRegex::recognize(pattern_);
}

Regex::~Regex() {
  if (regex_) onig_free(regex_);
}

bool Regex::search(std::string_view text, size_t from, size_t* begin, size_t* end) const {
  OnigRegion* region = thread_region();
  const OnigUChar* start = bytes(text);
  const OnigUChar* limit = start + text.size();
  const int found = onig_search(regex_, start, limit, start + from, limit, region, ONIG_OPTION_NONE);
  if (found == ONIG_MISMATCH) return false;
  if (found < 0) throw Error(cat("regex /", pattern_, "/ failed: ", onig_message(found, nullptr)));
  *begin = static_cast<size_t>(region->beg[0]);
  *end = static_cast<size_t>(region->end[0]);
  return true;
}

void Regex::find_all(std::string_view text, std::vector<Range>& out) const {
  if (known_) {
    known_->find_all(text, out);
    return;
  }
  size_t from = 0;
  bool has_previous = false;
  size_t previous_end = 0;
  while (from <= text.size()) {
    size_t begin = 0, end = 0;
    if (!search(text, from, &begin, &end)) return;
    if (begin == end && has_previous && previous_end == end) {
      from += from < text.size() ? unicode::sequence_length(static_cast<unsigned char>(text[from])) : 1;
      continue;
    }
    from = end;
    has_previous = true;
    previous_end = end;
    out.push_back({begin, end});
  }
}

bool Regex::matches_at(std::string_view text, size_t at) const {
  const OnigUChar* start = bytes(text);
  const int length =
      onig_match(regex_, start, start + text.size(), start + at, thread_region(), ONIG_OPTION_NONE);
  if (length == ONIG_MISMATCH) return false;
  if (length < 0) throw Error(cat("regex /", pattern_, "/ failed: ", onig_message(length, nullptr)));
  return true;
}

TextPattern TextPattern::literal(std::string text) {
  TextPattern pattern;
  // An empty literal matches the empty string at every character boundary, which only the regex engine's
  // iteration rules describe; a non-empty one is searched for directly.
  if (text.empty()) pattern.regex_ = std::make_shared<const Regex>("");
  pattern.literal_ = std::move(text);
  return pattern;
}

TextPattern TextPattern::regex(std::string_view pattern) {
  TextPattern out;
  out.regex_ = std::make_shared<const Regex>(pattern);
  return out;
}

void TextPattern::find_matches(std::string_view text, std::vector<Match>& out) const {
  if (text.empty()) {
    out.push_back({0, 0, false});
    return;
  }
  size_t previous = 0;
  const auto add = [&](size_t begin, size_t end) {
    if (previous != begin) out.push_back({previous, begin, false});
    out.push_back({begin, end, true});
    previous = end;
  };
  if (regex_) {
    thread_local std::vector<Range> ranges;
    ranges.clear();
    regex_->find_all(text, ranges);
    for (const Range& range : ranges) add(range.begin, range.end);
  } else {
    for (size_t at = text.find(literal_); at != std::string_view::npos; at = text.find(literal_, at)) {
      add(at, at + literal_.size());
      at += literal_.size();
    }
  }
  if (previous != text.size()) out.push_back({previous, text.size(), false});
}

void find_char_matches(std::string_view text, char32_t c, std::vector<Match>& out) {
  find_char_matches_if(
      text, [c](char32_t x) { return x == c; }, out);
}

void find_numeric_matches(std::string_view text, std::vector<Match>& out) {
  find_char_matches_if(text, unicode::is_numeric, out);
}

void split_ranges(const std::vector<Match>& matches, SplitBehavior behavior, std::vector<Range>& out) {
  const size_t first = out.size();
  // Each behavior keeps tokenizers' folding rules, including how a run of adjacent matches is grouped.
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const Match& m : matches) out.push_back({m.begin, m.end});
      return;
    case SplitBehavior::removed:
      for (const Match& m : matches) {
        if (!m.is_match) out.push_back({m.begin, m.end});
      }
      return;
    case SplitBehavior::contiguous: {
      bool previous_match = false;
      for (const Match& m : matches) {
        if (m.is_match == previous_match && out.size() > first) {
          out.back().end = m.end;
        } else {
          out.push_back({m.begin, m.end});
        }
        previous_match = m.is_match;
      }
      return;
    }
    case SplitBehavior::merged_with_previous: {
      bool previous_match = false;
      for (const Match& m : matches) {
        if (m.is_match && !previous_match && out.size() > first) {
          out.back().end = m.end;
        } else {
          out.push_back({m.begin, m.end});
        }
        previous_match = m.is_match;
      }
      return;
    }
    case SplitBehavior::merged_with_next: {
      bool previous_match = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->is_match && !previous_match && out.size() > first) {
          out.back().begin = it->begin;
        } else {
          out.push_back({it->begin, it->end});
        }
        previous_match = it->is_match;
      }
      std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
      return;
    }
  }
}

}  // namespace zaya::tok
