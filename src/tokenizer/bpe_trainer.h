#pragma once
// Training a byte-level BPE tokenizer (GPT-2's regex pre-tokenizer over bytes, as tokenizers'
// ByteLevelBPETokenizer) from plain UTF-8 text files. The result is a tokenizer.json that Tokenizer::load
// and the Python `tokenizers` library read and encode identically.

#include <cstdint>
#include <string>
#include <vector>

namespace zaya {

struct BpeTrainOptions {
  int64_t vocab_size = 8192;  // special tokens + 256 byte symbols + merges
  std::vector<std::string> special_tokens = {"<pad>", "<bos>", "<eos>", "<unk>"};
  int64_t min_frequency = 2;  // a pair seen fewer times is never merged
  // Text is read in blocks of this size, each cut after the last line where a cut cannot change a
  // pre-token (a line ending followed by a visible character); the result does not depend on it.
  int64_t read_block_bytes = int64_t(8) << 20;
};

struct BpeTrainSummary {
  int64_t bytes = 0;           // text read
  int64_t distinct_words = 0;  // distinct pre-tokens
  int64_t merges = 0;
  int64_t vocab_size = 0;  // can end below the requested size when no pair is frequent enough
};

// Streams the files (memory grows with the number of distinct pre-tokens, not with the corpus), counts
// pre-tokens in parallel, then merges, and writes `output` atomically.
// - Special tokens take ids 0.. in the given order, the 256 byte symbols the next ids in byte order, then
//   merged tokens in merge order. Special tokens written in the text are cut out before counting, as
//   encoding cuts them out.
// - Each step merges the most frequent adjacent pair; ties go to the pair whose (left id, right id) is
//   smallest. Counts do not depend on the thread count, so neither does the file.
// - A file that is not valid UTF-8 is an Error naming the file and line.
BpeTrainSummary train_byte_level_bpe(const std::vector<std::string>& files, const BpeTrainOptions& options,
                                     const std::string& output);

}  // namespace zaya
