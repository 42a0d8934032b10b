#include "tokenizer/bpe_trainer.h"

#include <omp.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <queue>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "core/threads.h"
#include "io/atomic_file.h"
#include "tokenizer/bpe_byte_level.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pattern.h"
#include "tokenizer/unicode_text.h"

namespace zaya {
namespace {

using WordCounts = std::unordered_map<std::string, int64_t, tok::StringHash, std::equal_to<>>;

// Whether cutting the text right before text[at] leaves every pre-token unchanged: text[at] is a line feed
// followed by a visible character. GPT-2's regex then makes that line feed a pre-token of its own, and
// whatever precedes it (a whitespace run included: at the end of a text it stays one pre-token, as it does
// before a line feed) ends there.
bool safe_cut(std::string_view text, size_t at) {
  if (at == 0 || at + 1 >= text.size() || text[at] != '\n') return false;
  const auto lead = static_cast<unsigned char>(text[at + 1]);
  if (lead < 0x80) return lead > 0x20 && lead < 0x7F;
  const size_t length = unicode::sequence_length(lead);
  if (at + 1 + length > text.size() ||
      unicode::find_invalid_utf8(text.substr(at + 1, length)) != unicode::npos) {
    return false;
  }
  return unicode::is_letter_or_number(unicode::decode_at(text, at + 1));
}

// The last safe cut in text, or npos.
size_t last_safe_cut(std::string_view text) {
  for (size_t at = text.size(); at-- > 1;) {
    if (safe_cut(text, at)) return at;
  }
  return std::string_view::npos;
}

// The first safe cut at or after `from`, or text.size().
size_t next_safe_cut(std::string_view text, size_t from) {
  for (size_t at = std::max<size_t>(from, 1); at < text.size(); ++at) {
    if (safe_cut(text, at)) return at;
  }
  return text.size();
}

class PreTokenCounter {
 public:
  explicit PreTokenCounter(const std::vector<std::string>& specials)
      : specials_(specials), pattern_(tok::TextPattern::regex(tok::kGpt2Pattern)) {}

  // Adds the pre-tokens of `text` (whole lines) to counts.
  void count(std::string_view text, WordCounts& counts) const {
    std::vector<tok::Match> matches;
    size_t at = 0;
    while (at < text.size()) {
      size_t special_begin = text.size(), special_length = 0;
      next_special(text, at, &special_begin, &special_length);
      count_segment(text.substr(at, special_begin - at), counts, matches);
      at = special_begin + special_length;
    }
  }

 private:
  // The leftmost-longest special token at or after `from` (as encoding finds added tokens).
  void next_special(std::string_view text, size_t from, size_t* begin, size_t* length) const {
    for (const std::string& special : specials_) {
      const size_t found = text.find(special, from);
      if (found == std::string_view::npos) continue;
      if (found < *begin || (found == *begin && special.size() > *length)) {
        *begin = found;
        *length = special.size();
      }
    }
  }

  void count_segment(std::string_view segment, WordCounts& counts, std::vector<tok::Match>& matches) const {
    if (segment.empty()) return;
    matches.clear();
    pattern_.find_matches(segment, matches);
    for (const tok::Match& m : matches) {
      if (m.end == m.begin) continue;
      const std::string_view word = segment.substr(m.begin, m.end - m.begin);
      const auto it = counts.find(word);
      if (it != counts.end()) {
        ++it->second;
      } else {
        counts.emplace(std::string(word), 1);
      }
    }
  }

  const std::vector<std::string>& specials_;
  tok::TextPattern pattern_;
};

// Counts the pre-tokens of `text` (whole lines) on all threads into `counts`.
void count_parallel(std::string_view text, const PreTokenCounter& counter, WordCounts& counts) {
  const auto parts = static_cast<size_t>(std::max(1, omp_get_max_threads()));
  std::vector<size_t> cuts = {0};
  for (size_t p = 1; p < parts; ++p) {
    const size_t cut = next_safe_cut(text, std::max(cuts.back(), text.size() * p / parts));
    if (cut > cuts.back() && cut < text.size()) cuts.push_back(cut);
  }
  cuts.push_back(text.size());
  std::vector<WordCounts> local(cuts.size() - 1);
  parallel_for_rethrowing(static_cast<int64_t>(local.size()), [&](int64_t p) {
    const auto i = static_cast<size_t>(p);
    counter.count(text.substr(cuts[i], cuts[i + 1] - cuts[i]), local[i]);
  });
  for (WordCounts& part : local) {
    for (auto& [word, n] : part) counts[word] += n;
  }
}

// Streams one file in blocks cut at safe points; returns the bytes read.
int64_t count_file(const std::string& path, size_t block, const PreTokenCounter& counter,
                   WordCounts& counts) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(cat("cannot open: ", std::strerror(errno))).file(path);
  std::string buffer;
  int64_t line = 1, total = 0;
  bool done = false;
  while (!done) {
    const size_t old_size = buffer.size();
    buffer.resize(old_size + block);
    in.read(buffer.data() + old_size, static_cast<std::streamsize>(block));
    buffer.resize(old_size + static_cast<size_t>(in.gcount()));
    if (in.bad()) throw Error("read failed").file(path);
    done = in.eof();
    const size_t cut = done ? buffer.size() : last_safe_cut(buffer);
    if (cut == std::string_view::npos) continue;  // no safe point yet: read on
    const std::string_view text = std::string_view(buffer).substr(0, cut);
    if (const size_t bad = unicode::find_invalid_utf8(text); bad != unicode::npos) {
      const int64_t bad_line = line + std::count(text.begin(), text.begin() + static_cast<long>(bad), '\n');
      throw Error(cat("invalid UTF-8 at line ", bad_line)).file(path);
    }
    count_parallel(text, counter, counts);
    line += std::count(text.begin(), text.end(), '\n');
    total += static_cast<int64_t>(cut);
    buffer.erase(0, cut);
  }
  return total;
}

// The merge loop over distinct words, each a sequence of symbol ids with its count.
class Merger {
 public:
  Merger(std::vector<std::vector<int32_t>> words, std::vector<int64_t> counts)
      : words_(std::move(words)), counts_(std::move(counts)) {
    for (size_t w = 0; w < words_.size(); ++w) {
      const auto& s = words_[w];
      for (size_t i = 0; i + 1 < s.size(); ++i) add(key(s[i], s[i + 1]), counts_[w], static_cast<int32_t>(w));
    }
    for (const auto& [pair, n] : pair_counts_) queue_.push({n, pair});
  }

  // The most frequent pair with at least min_frequency occurrences; false when there is none.
  bool best(int64_t min_frequency, int32_t* left, int32_t* right) {
    while (!queue_.empty()) {
      const Candidate top = queue_.top();
      queue_.pop();
      const auto it = pair_counts_.find(top.pair);
      const int64_t current = it == pair_counts_.end() ? 0 : it->second;
      if (current != top.count) {
        if (current > 0) queue_.push({current, top.pair});
        continue;
      }
      if (current < min_frequency) return false;
      *left = static_cast<int32_t>(top.pair >> 32);
      *right = static_cast<int32_t>(top.pair & 0xFFFFFFFFu);
      return true;
    }
    return false;
  }

  // Replaces every (left, right) in every word, left to right, by `merged`.
  void merge(int32_t left, int32_t right, int32_t merged) {
    const uint64_t pair = key(left, right);
    std::vector<int32_t> where = std::move(where_[pair]);
    where_.erase(pair);
    std::sort(where.begin(), where.end());
    where.erase(std::unique(where.begin(), where.end()), where.end());
    std::vector<uint64_t> grown;
    for (const int32_t w : where) {
      std::vector<int32_t>& s = words_[size_t(w)];
      const int64_t n = counts_[size_t(w)];
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        if (s[i] != left || s[i + 1] != right) continue;
        if (i > 0) {
          pair_counts_[key(s[i - 1], left)] -= n;
          add(key(s[i - 1], merged), n, w);
          grown.push_back(key(s[i - 1], merged));
        }
        if (i + 2 < s.size()) {
          pair_counts_[key(right, s[i + 2])] -= n;
          add(key(merged, s[i + 2]), n, w);
          grown.push_back(key(merged, s[i + 2]));
        }
        s[i] = merged;
        s.erase(s.begin() + static_cast<long>(i) + 1);
      }
    }
    pair_counts_.erase(pair);
    std::sort(grown.begin(), grown.end());
    grown.erase(std::unique(grown.begin(), grown.end()), grown.end());
    for (const uint64_t p : grown) {
      const int64_t n = pair_counts_[p];
      if (n > 0) queue_.push({n, p});
    }
  }

 private:
  struct Candidate {
    int64_t count;
    uint64_t pair;
    // The queue's top is the largest count, then the smallest (left, right).
    bool operator<(const Candidate& other) const {
      return count != other.count ? count < other.count : pair > other.pair;
    }
  };

  static uint64_t key(int32_t left, int32_t right) {
    return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
  }

  void add(uint64_t pair, int64_t n, int32_t word) {
    pair_counts_[pair] += n;
    std::vector<int32_t>& where = where_[pair];
    if (where.empty() || where.back() != word) where.push_back(word);
  }

  std::vector<std::vector<int32_t>> words_;
  std::vector<int64_t> counts_;
  std::unordered_map<uint64_t, int64_t> pair_counts_;
  std::unordered_map<uint64_t, std::vector<int32_t>> where_;  // words that contained the pair (may be stale)
  std::priority_queue<Candidate> queue_;
};

void check_options(const BpeTrainOptions& options) {
  std::unordered_set<std::string> seen;
  for (const std::string& special : options.special_tokens) {
    if (special.empty()) throw Error("special tokens must not be empty");
    if (unicode::find_invalid_utf8(special) != unicode::npos) throw Error("special tokens must be UTF-8");
    if (special.find('\n') != std::string::npos) {
      throw Error(cat("special token \"", special, "\" contains a line break"));
    }
    if (!seen.insert(special).second) throw Error(cat("special token \"", special, "\" is listed twice"));
  }
  const auto least = static_cast<int64_t>(options.special_tokens.size()) + 256;
  if (options.vocab_size < least) {
    throw Error(
        cat("vocab_size ", options.vocab_size, " is below ", least, " (special tokens + 256 byte symbols)"));
  }
  if (options.vocab_size > INT32_MAX) throw Error(cat("vocab_size ", options.vocab_size, " is too large"));
  if (options.min_frequency < 1) throw Error("min_frequency must be at least 1");
  if (options.read_block_bytes < 1) throw Error("read_block_bytes must be at least 1");
}

nlohmann::ordered_json tokenizer_json(const std::vector<std::string>& tokens, size_t specials,
                                      const std::vector<std::pair<int32_t, int32_t>>& merges) {
  using nlohmann::ordered_json;
  ordered_json added = ordered_json::array();
  for (size_t id = 0; id < specials; ++id) {
    added.push_back({{"id", id},
                     {"content", tokens[id]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  ordered_json vocab = ordered_json::object();
  for (size_t id = 0; id < tokens.size(); ++id) vocab[tokens[id]] = id;
  ordered_json merge_list = ordered_json::array();
  for (const auto& [left, right] : merges)
    merge_list.push_back({tokens[size_t(left)], tokens[size_t(right)]});
  const ordered_json byte_level = {
      {"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", added},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor", byte_level},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", false},
            {"vocab", vocab},
            {"merges", merge_list}}}};
}

}  // namespace

BpeTrainSummary train_byte_level_bpe(const std::vector<std::string>& files, const BpeTrainOptions& options,
                                     const std::string& output) {
  check_options(options);
  BpeTrainSummary summary;
  WordCounts counts;
  const PreTokenCounter counter(options.special_tokens);
  for (const std::string& file : files) {
    summary.bytes += count_file(file, static_cast<size_t>(options.read_block_bytes), counter, counts);
  }
  summary.distinct_words = static_cast<int64_t>(counts.size());
  // A tokenizer of bytes alone would be written without a word, and every later step would be slow.
  if (counts.empty())
    throw Error(cat("no text to learn from in ", files.size(), " file(s) of ", summary.bytes, " bytes"))
        .field("--input");

  // Token strings by id (byte-level characters), and the id of each string.
  const tok::ByteLevelAlphabet& alphabet = tok::ByteLevelAlphabet::get();
  std::vector<std::string> tokens(options.special_tokens);
  std::unordered_map<std::string, int32_t> ids;
  for (size_t id = 0; id < tokens.size(); ++id) ids.emplace(tokens[id], static_cast<int32_t>(id));
  const auto first_byte = static_cast<int32_t>(tokens.size());
  for (int b = 0; b < 256; ++b) {
    const std::string symbol(alphabet.char_of(static_cast<uint8_t>(b)));
    if (!ids.emplace(symbol, static_cast<int32_t>(tokens.size())).second) {
      throw Error(cat("special token \"", symbol, "\" is one of the 256 byte symbols"));
    }
    tokens.push_back(symbol);
  }

  // Words in byte order, so that word indices (and everything after) are independent of hashing.
  std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
  counts.clear();
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::vector<int32_t>> words;
  std::vector<int64_t> word_counts;
  words.reserve(sorted.size());
  word_counts.reserve(sorted.size());
  for (auto& [word, n] : sorted) {
    std::vector<int32_t> symbols;
    symbols.reserve(word.size());
    for (const char c : word) symbols.push_back(first_byte + static_cast<uint8_t>(c));
    words.push_back(std::move(symbols));
    word_counts.push_back(n);
  }
  sorted.clear();

  Merger merger(std::move(words), std::move(word_counts));
  std::vector<std::pair<int32_t, int32_t>> merges;
  int32_t left = 0, right = 0;
  while (static_cast<int64_t>(tokens.size()) < options.vocab_size &&
         merger.best(options.min_frequency, &left, &right)) {
    std::string merged = tokens[size_t(left)] + tokens[size_t(right)];
    auto [it, added] = ids.emplace(merged, static_cast<int32_t>(tokens.size()));
    if (added) tokens.push_back(std::move(merged));
    merger.merge(left, right, it->second);
    merges.emplace_back(left, right);
  }
  summary.merges = static_cast<int64_t>(merges.size());
  summary.vocab_size = static_cast<int64_t>(tokens.size());

  write_file_atomic(output, tokenizer_json(tokens, options.special_tokens.size(), merges).dump(2) + "\n");
  return summary;
}

}  // namespace zaya
