#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>

#include "core/error.h"
#include "tokenizer/document.h"
#include "tokenizer/json.h"
#include "tokenizer/unicode_text.h"

namespace zaya::tok {
namespace {

constexpr char32_t kPlainCharLimit = 0x800;
constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581, SentencePiece's space
// tokenizers caches words shorter than this many bytes; longer ones are rare and would crowd the cache.
constexpr size_t kMaxCachedWord = 256;

uint64_t next_model_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
}

std::string byte_token(uint8_t b) {
  char text[8];
  std::snprintf(text, sizeof text, "<0x%02X>", unsigned(b));
  return text;
}

}  // namespace

// Open addressing over (left, right) id pairs; ids are non-negative so the all-ones key marks a free slot.
class BpeModel::PairTable {
 public:
  struct Entry {
    uint64_t key;
    uint32_t rank;
    int32_t merged;
  };

  explicit PairTable(size_t count) {
    size_t capacity = 16;
    while (capacity < count * 2) capacity *= 2;
    slots_.assign(capacity, Entry{kFree, 0, 0});
    mask_ = capacity - 1;
  }

  // A pair listed again replaces the earlier entry, as tokenizers' collect into a HashMap does.
  void assign(uint64_t key, uint32_t rank, int32_t merged) {
    size_t at = slot_of(key);
    while (slots_[at].key != kFree && slots_[at].key != key) at = (at + 1) & mask_;
    slots_[at] = Entry{key, rank, merged};
  }

  const Entry* find(uint64_t key) const {
    for (size_t at = slot_of(key);; at = (at + 1) & mask_) {
      if (slots_[at].key == key) return &slots_[at];
      if (slots_[at].key == kFree) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kFree = ~uint64_t(0);
  size_t slot_of(uint64_t key) const { return size_t((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }

  std::vector<Entry> slots_;
  size_t mask_ = 0;
};

struct BpeModel::Scratch {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // neighbours in the word, -1 at the ends
    uint32_t length;     // bytes of the word it covers; 0 once merged into its left neighbour
  };
  struct Candidate {
    uint32_t rank, position;
    int32_t merged;
  };
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  std::vector<int32_t> ids;
  std::string key;

  void add(int32_t id, size_t length) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, static_cast<uint32_t>(length)});
  }
};

BpeModel::BpeModel(std::vector<std::pair<std::string, int32_t>> vocab, const std::vector<Merge>& merges,
                   BpeOptions options)
    : id_(next_model_id()),
      options_(std::move(options)),
      merges_(std::make_unique<PairTable>(merges.size())),
      plain_char_ids_(kPlainCharLimit, -1),
      byte_ids_(256, -1) {
  tokens_.reserve(vocab.size());
  vocab_.reserve(vocab.size());
  for (auto& [token, id] : vocab) {
    max_id_ = std::max(max_id_, id);
    vocab_.assign(token, id);
    tokens_.emplace(id, std::move(token));
  }
  vocab_.for_each([&](std::string_view token, int32_t id) {
    if (!token.empty() && unicode::sequence_length(static_cast<unsigned char>(token[0])) == token.size()) {
      const char32_t c = unicode::decode_at(token, 0);
      if (c < kPlainCharLimit) plain_char_ids_[c] = id;
    }
  });
  for (int b = 0; b < 256; ++b) {
    if (auto id = token_to_id(byte_token(static_cast<uint8_t>(b)))) byte_ids_[b] = *id;
  }
  const size_t prefix_length =
      options_.continuing_subword_prefix ? options_.continuing_subword_prefix->size() : 0;
  std::string merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const auto fail = [&](const std::string& message) { throw BadMerge{rank, message}; };
    const auto id_of = [&](const std::string& token) {
      const auto id = token_to_id(token);
      if (!id) fail(cat("token \"", token, "\" is not in the vocabulary"));
      return *id;
    };
    const int32_t left_id = id_of(left);
    const int32_t right_id = id_of(right);
    // The merged token drops the right part's continuing_subword_prefix.
    if (right.size() < prefix_length ||
        (prefix_length < right.size() && (static_cast<unsigned char>(right[prefix_length]) & 0xC0) == 0x80)) {
      fail(cat("token \"", right, "\" does not start with the continuing_subword_prefix"));
    }
    merged.assign(left);
    merged.append(right, prefix_length);
    const int32_t merged_id = id_of(merged);
    merges_->assign(pair_key(left_id, right_id), static_cast<uint32_t>(rank), merged_id);
  }
  // Symbols ending right before a "▁" that follows another character carry that character's text, or a
  // <0xXX> or unk token; so a merge that could join across needs a right part starting with "▁" and a left
  // part not ending with it (an unk token ending with "▁" would hide one).
  const auto ends_with_space = [](std::string_view token) {
    return token.size() >= kMetaspace.size() && token.substr(token.size() - kMetaspace.size()) == kMetaspace;
  };
  merge_by_piece_ = !options_.continuing_subword_prefix && !options_.end_of_word_suffix &&
                    token_to_id(kMetaspace).has_value() &&
                    !(options_.unk_token && ends_with_space(*options_.unk_token));
  for (size_t rank = 0; rank < merges.size() && merge_by_piece_; ++rank) {
    const auto& [left, right] = merges[rank];
    if (right.rfind(kMetaspace, 0) == 0 && !ends_with_space(left)) merge_by_piece_ = false;
  }
}

BpeModel::BpeModel(BpeModel&&) noexcept = default;
BpeModel& BpeModel::operator=(BpeModel&&) noexcept = default;
BpeModel::~BpeModel() = default;

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const int32_t id = vocab_.find(token);
  if (id < 0) return std::nullopt;
  return id;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  const auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : &it->second;
}

int32_t BpeModel::unk_id() const {
  const auto id = token_to_id(*options_.unk_token);
  if (!id) throw Error(cat("unk_token \"", *options_.unk_token, "\" is not in the vocabulary"));
  return *id;
}

void BpeModel::initial_symbols(std::string_view word, Scratch& scratch) const {
  scratch.symbols.clear();
  const std::string* prefix =
      options_.continuing_subword_prefix ? &*options_.continuing_subword_prefix : nullptr;
  const std::string* suffix = options_.end_of_word_suffix ? &*options_.end_of_word_suffix : nullptr;
  // A run of characters outside the vocabulary waiting to become unk tokens: (id, bytes covered).
  bool unk_pending = false;
  int32_t pending_id = 0;
  size_t pending_length = 0;
  for (size_t at = 0; at < word.size();) {
    const size_t length = unicode::sequence_length(static_cast<unsigned char>(word[at]));
    const bool decorated = (at > 0 && prefix) || (at + length == word.size() && suffix);
    std::string_view piece = word.substr(at, length);
    int32_t id = -1;
    if (!decorated && length <= 2) {
      id = plain_char_ids_[unicode::decode_at(word, at)];
    } else {
      if (decorated) {
        scratch.key.clear();
        if (at > 0 && prefix) scratch.key += *prefix;
        scratch.key += piece;
        if (at + length == word.size() && suffix) scratch.key += *suffix;
        piece = scratch.key;
      }
      if (const auto found = token_to_id(piece)) id = *found;
    }
    at += length;
    if (id >= 0) {
      if (unk_pending) scratch.add(pending_id, pending_length);
      unk_pending = false;
      scratch.add(id, length);
      continue;
    }
    if (options_.byte_fallback) {
      // The decorated form's bytes, all or nothing; a pending unk stays pending (as in tokenizers).
      const bool all_known = std::all_of(piece.begin(), piece.end(),
                                         [&](char b) { return byte_ids_[static_cast<uint8_t>(b)] >= 0; });
      if (all_known) {
        for (const char b : piece) scratch.add(byte_ids_[static_cast<uint8_t>(b)], 1);
        continue;
      }
    }
    if (!options_.unk_token) continue;
    if (unk_pending && options_.fuse_unk) {
      pending_length += length;
    } else {
      if (unk_pending) scratch.add(pending_id, pending_length);
      pending_id = unk_id();
      pending_length = length;
      unk_pending = true;
    }
  }
  if (unk_pending) scratch.add(pending_id, pending_length);
}

void BpeModel::merge_symbols(Scratch& scratch) const {
  auto& symbols = scratch.symbols;
  auto& heap = scratch.heap;
  // Min-heap on (rank, position).
  const auto later = [](const Scratch::Candidate& a, const Scratch::Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.position > b.position;
  };
  heap.clear();
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const auto* merge = merges_->find(pair_key(symbols[i].id, symbols[i + 1].id))) {
      heap.push_back({merge->rank, static_cast<uint32_t>(i), merge->merged});
    }
  }
  std::make_heap(heap.begin(), heap.end(), later);
  const auto push = [&](uint32_t position, int32_t left, int32_t right) {
    if (const auto* merge = merges_->find(pair_key(left, right))) {
      heap.push_back({merge->rank, position, merge->merged});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Scratch::Candidate top = heap.back();
    heap.pop_back();
    Scratch::Symbol& current = symbols[top.position];
    if (current.length == 0 || current.next == -1) continue;
    const Scratch::Symbol right = symbols[current.next];
    // A stale candidate: the pair at this position changed since it was queued.
    const auto* merge = merges_->find(pair_key(current.id, right.id));
    if (!merge || merge->merged != top.merged) continue;
    symbols[current.next].length = 0;
    current.id = top.merged;
    current.length += right.length;
    current.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = static_cast<int32_t>(top.position);
    const Scratch::Symbol merged = current;
    if (merged.prev >= 0) push(static_cast<uint32_t>(merged.prev), symbols[merged.prev].id, merged.id);
    if (merged.next >= 0) push(top.position, merged.id, symbols[merged.next].id);
  }
}

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  // Symbols keep 32-bit positions and lengths.
  if (word.size() > UINT32_MAX) throw Error("a piece of text without a split point is longer than 4 GiB");
  const bool cacheable = word.size() < kMaxCachedWord;
  const uint64_t hash = cacheable ? hash_text(word) : 0;
  WordCache* cache = cacheable ? &WordCache::of_model(id_) : nullptr;
  if (cache && cache->find(word, hash, out)) return;
  thread_local Scratch scratch;
  initial_symbols(word, scratch);
  merge_symbols(scratch);
  const size_t first = out.size();
  for (const auto& symbol : scratch.symbols) {
    if (symbol.length != 0) out.push_back(symbol.id);
  }
  if (cache) cache->insert(word, hash, out.data() + first, out.size() - first);
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (const auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  if (!merge_by_piece_) {
    merge_word(word, out);
    return;
  }
  size_t begin = 0;
  for (size_t at = word.find(kMetaspace, 1); at != std::string_view::npos;
       at = word.find(kMetaspace, at + 1)) {
    const bool follows_space =
        at >= kMetaspace.size() && word.substr(at - kMetaspace.size(), kMetaspace.size()) == kMetaspace;
    if (follows_space) continue;
    merge_word(word.substr(begin, at - begin), out);
    begin = at;
  }
  merge_word(word.substr(begin), out);
}

BpeModel parse_bpe_model(const JsonField& json, TokenizerDocument& document) {
  if (json.is_null()) json.fail("missing");
  const JsonField type = json["type"];
  if (!type.is_null() && type.string() != "BPE") type.unsupported(type.string());
  const JsonField dropout = json["dropout"];
  if (!dropout.is_null()) {
    if (!dropout.json().is_number()) dropout.fail("expected a number or null");
    if (dropout.json().get<double>() != 0.0) dropout.unsupported("BPE dropout (must be null or 0)");
  }
  BpeOptions options;
  options.unk_token = json["unk_token"].optional_string();
  options.continuing_subword_prefix = json["continuing_subword_prefix"].optional_string();
  options.end_of_word_suffix = json["end_of_word_suffix"].optional_string();
  options.fuse_unk = json["fuse_unk"].boolean(false);
  options.byte_fallback = json["byte_fallback"].boolean(false);
  options.ignore_merges = json["ignore_merges"].boolean(false);

  if (!document.vocab) json["vocab"].fail("missing");
  if (!document.merges) json["merges"].fail("missing");
  try {
    return BpeModel(std::move(*document.vocab), *document.merges, std::move(options));
  } catch (const BpeModel::BadMerge& bad) {
    json.fail_below(cat("merges[", document.merge_index[bad.rank], "]"), bad.message);
  }
}

}  // namespace zaya::tok
