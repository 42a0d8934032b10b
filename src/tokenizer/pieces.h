#pragma once
// The text that moves through a tokenizer's normalizer and pre-tokenizer, and the per-thread scratch space
// the steps share so that encoding reuses its buffers from call to call. Internal to src/data.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/pattern.h"

namespace zaya::tok {

// tokenizers tracks, for every normalized byte, the original bytes it came from. Two consequences of that
// reach the ids, and these are what a piece keeps:
// - at_origin: the piece starts at byte 0 of the input (NormalizedString::offsets_original().0 == 0), which
//   Metaspace's prepend_scheme "first" asks;
// - origin_len: how many leading bytes are aligned to the piece's first original byte (bytes a normalizer
//   added in front, or the expansion of the first character), which decides whether a piece cut out of this
//   one still starts at the origin.
struct Piece {
  std::string_view text;
  bool at_origin = false;
  size_t origin_len = 0;
};

// tokenizers' NormalizedString::slice, for the two facts above.
inline Piece slice(const Piece& piece, size_t begin, size_t end) {
  Piece out{piece.text.substr(begin, end - begin), piece.at_origin && begin < piece.origin_len, 0};
  if (out.at_origin) out.origin_len = std::min(end, piece.origin_len) - begin;
  return out;
}

// Text being normalized, with the alignment fact of Piece.
struct NormalizedText {
  std::string text;
  size_t origin_len = 0;
};

// Storage whose views stay valid until reset(); blocks are kept for reuse.
class TextArena {
 public:
  std::string_view store(std::string_view text) {
    if (text.empty()) return {};
    while (block_ < blocks_.size() && used_ + text.size() > blocks_[block_].capacity) {
      ++block_;
      used_ = 0;
    }
    if (block_ == blocks_.size()) {
      const size_t capacity = std::max<size_t>(size_t(1) << 16, text.size());
      blocks_.push_back({std::make_unique<char[]>(capacity), capacity});
    }
    char* out = blocks_[block_].data.get() + used_;
    std::memcpy(out, text.data(), text.size());
    used_ += text.size();
    return {out, text.size()};
  }
  void reset() {
    block_ = 0;
    used_ = 0;
  }

 private:
  struct Block {
    std::unique_ptr<char[]> data;
    size_t capacity;
  };
  std::vector<Block> blocks_;
  size_t block_ = 0, used_ = 0;
};

// Scratch space of one thread's encode calls.
struct Workspace {
  TextArena arena;
  std::string text;  // a step's output before it is stored
  std::vector<Match> matches;
  std::vector<Range> ranges;

  // Piece lists for nested pre-tokenizer sequences, handed out like a stack.
  std::vector<Piece>& acquire_pieces() {
    if (depth_ == piece_lists_.size()) piece_lists_.emplace_back();
    std::vector<Piece>& list = piece_lists_[depth_++];
    list.clear();
    return list;
  }
  void release_pieces() { --depth_; }

 private:
  std::deque<std::vector<Piece>> piece_lists_;  // a deque: handing out a list never moves the others
  size_t depth_ = 0;
};

}  // namespace zaya::tok
