// Training a byte-level BPE: the file loads, compresses held-out text, round-trips it, and does not depend
// on the thread count or the read block size.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/threads.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

using nlohmann::json;

struct Corpus {
  std::string train, held_out;
};

// The first 400 kB of the fixture corpus to train on (cut at a line), 60 kB after it held out.
const Corpus& corpus() {
  static const Corpus instance = [] {
    const std::string all = test::read_bytes(test::fixture("tokenizer/corpus.txt"));
    const size_t cut = all.find('\n', 400000) + 1;
    const size_t end = all.find('\n', cut + 60000) + 1;
    return Corpus{all.substr(0, cut), all.substr(cut, end - cut)};
  }();
  return instance;
}

std::string train(const test::TempDir& dir, const BpeTrainOptions& options, int threads,
                  const std::string& name) {
  const std::string input = dir.file("train.txt");
  test::write_bytes(input, corpus().train);
  const int saved = num_threads();
  set_num_threads(threads);
  const std::string output = dir.file(name);
  train_byte_level_bpe({input}, options, output);
  set_num_threads(saved);
  return output;
}

TEST(BpeTrainer, TrainedTokenizerLoadsCompressesAndRoundTrips) {
  const test::TempDir dir;
  BpeTrainOptions options;
  options.vocab_size = 2000;
  const Tokenizer tokenizer = Tokenizer::load(train(dir, options, 2, "tokenizer.json"));
  EXPECT_EQ(tokenizer.vocab_size(), 2000);
  EXPECT_EQ(tokenizer.pad_id(), 0);
  EXPECT_EQ(tokenizer.bos_id(), 1);
  EXPECT_EQ(tokenizer.eos_id(), 2);
  EXPECT_EQ(tokenizer.token_to_id("<unk>"), 3);
  EXPECT_EQ(tokenizer.token_to_id("!"), 4 + '!');   // byte symbols follow the special tokens in byte order
  EXPECT_EQ(tokenizer.token_to_id("\xC4\x80"), 4);  // byte 0 is shown as U+0100

  const std::string& held_out = corpus().held_out;
  const std::vector<int32_t> ids = tokenizer.encode(held_out);
  EXPECT_LT(ids.size() * 2, held_out.size()) << "fewer than 2 bytes per token on held-out text";
  EXPECT_EQ(tokenizer.decode(ids), held_out);
  EXPECT_EQ(tokenizer.encode("a<eos>b"), (std::vector<int32_t>{4 + 'a', 2, 4 + 'b'}));
}

TEST(BpeTrainer, SameFileForAnyThreadCountAndReadBlock) {
  const test::TempDir dir;
  BpeTrainOptions options;
  options.vocab_size = 1200;
  options.special_tokens = {"<|endoftext|>", "<s>"};
  const std::string one = test::read_bytes(train(dir, options, 1, "one.json"));
  const std::string two = test::read_bytes(train(dir, options, 2, "two.json"));
  options.read_block_bytes = 3000;
  const std::string small_blocks = test::read_bytes(train(dir, options, 3, "small.json"));
  // Compared as booleans: a failure would otherwise print two whole tokenizer files.
  EXPECT_TRUE(one == two) << "1 and 2 threads differ";
  EXPECT_TRUE(one == small_blocks) << "3000-byte blocks on 3 threads differ";
  const json config = json::parse(one);
  EXPECT_EQ(config["added_tokens"][0]["content"], "<|endoftext|>");
  EXPECT_EQ(config["model"]["vocab"]["<s>"], 1);
  EXPECT_EQ(config["model"]["merges"].size(), 1200u - 2 - 256);
}

TEST(BpeTrainer, MinFrequencyStopsMerging) {
  const test::TempDir dir;
  const std::string input = dir.file("tiny.txt");
  test::write_bytes(input, "low lower lowest\nnewer wider\n");
  BpeTrainOptions options;
  options.vocab_size = 1000;
  options.min_frequency = 2;
  const BpeTrainSummary summary = train_byte_level_bpe({input}, options, dir.file("t.json"));
  EXPECT_EQ(summary.bytes, 29);
  EXPECT_GT(summary.merges, 0);
  EXPECT_LT(summary.vocab_size, 1000);
  // "er", "lo", "ow" and "we" all occur 3 times; ties go to the smallest pair of ids, and "e" < "l" < ...
  const json config = json::parse(test::read_bytes(dir.file("t.json")));
  EXPECT_EQ(config["model"]["merges"][0], json::array({"e", "r"}));
  const Tokenizer tokenizer = Tokenizer::load(dir.file("t.json"));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("lowest newer")), "lowest newer");
}

TEST(BpeTrainer, ErrorsNameTheProblem) {
  const test::TempDir dir;
  const std::string bad = dir.file("bad.txt");
  test::write_bytes(bad, "fine line\nsecond\nthird \xC3\x28 line\n");
  BpeTrainOptions options;
  options.vocab_size = 300;
  try {
    train_byte_level_bpe({bad}, options, dir.file("out.json"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), bad + ": invalid UTF-8 at line 3");
  }
  try {
    train_byte_level_bpe({dir.file("missing.txt")}, options, dir.file("out.json"));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.file_name(), dir.file("missing.txt"));
  }
  options.vocab_size = 100;
  EXPECT_THROW(train_byte_level_bpe({}, options, dir.file("out.json")), Error);
  options.vocab_size = 300;
  options.special_tokens = {"<a>", "<a>"};
  EXPECT_THROW(train_byte_level_bpe({}, options, dir.file("out.json")), Error);
  options.special_tokens = {"!"};
  EXPECT_THROW(train_byte_level_bpe({}, options, dir.file("out.json")), Error);
}

}  // namespace
}  // namespace zaya
