// zaya prepare: documents in, token datasets out, each document ended by the end-of-document token, the
// validation split decided per document from the seed, and nothing left behind on failure.

#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "data/dataset_provenance.h"
#include "data/indexed_dataset.h"
#include "data/prepare.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/tokenizer.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

class PrepareTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.file("corpus"));
    std::vector<std::string> files;
    for (int d = 0; d < 40; ++d) {
      std::string text;
      for (int line = 0; line <= d % 7; ++line)
        text += "Document " + std::to_string(d) + " says line " + std::to_string(line) + ".\n";
      files.push_back(dir_.file("corpus/doc" + std::to_string(100 + d) + ".txt"));
      test::write_bytes(files.back(), text);
    }
    BpeTrainOptions options;
    options.vocab_size = 300;
    train_byte_level_bpe(files, options, dir_.file("tokenizer.json"));
  }
  PrepareOptions options(double val_fraction) {
    PrepareOptions o;
    o.tokenizer = dir_.file("tokenizer.json");
    o.inputs = {dir_.file("corpus")};
    o.output = dir_.file("out");
    o.val_fraction = val_fraction;
    o.seed = 3;
    return o;
  }
  test::TempDir dir_;
};

TEST_F(PrepareTest, EveryDocumentIsEncodedAndEndedOnce) {
  const PrepareReport report = prepare_dataset(options(0.25), {});
  EXPECT_EQ(report.train_documents + report.val_documents, 40);
  EXPECT_GT(report.val_documents, 2);
  EXPECT_LT(report.val_documents, 20);
  const Tokenizer tokenizer = Tokenizer::load(dir_.file("tokenizer.json"));
  const IndexedDataset train(report.train_prefix), val(report.val_prefix);
  EXPECT_EQ(train.document_count(), report.train_documents);
  EXPECT_EQ(train.total_tokens() + val.total_tokens(), report.train_tokens + report.val_tokens);
  int64_t total_documents = 0;
  for (const IndexedDataset* data : {&train, &val}) {
    for (int64_t s = 0; s < data->sequence_count(); ++s) {
      std::vector<int32_t> ids(static_cast<size_t>(data->sequence_length(s)));
      data->read(s, 0, data->sequence_length(s), ids.data());
      EXPECT_EQ(ids.back(), *tokenizer.eos_id());
      EXPECT_EQ(std::count(ids.begin(), ids.end(), *tokenizer.eos_id()), 1);
      ids.pop_back();
      const std::string text = tokenizer.decode(ids);
      EXPECT_EQ(text.rfind("Document ", 0), 0u) << text;
      ++total_documents;
    }
  }
  EXPECT_EQ(total_documents, 40);
  // The split depends on the seed only.
  const PrepareReport again = prepare_dataset(options(0.25), {});
  EXPECT_EQ(again.val_documents, report.val_documents);
  EXPECT_EQ(test::read_bytes(report.val_prefix + ".bin"), test::read_bytes(again.val_prefix + ".bin"));
}

TEST_F(PrepareTest, BadInputLeavesNothingBehind) {
  test::write_bytes(dir_.file("corpus/zz_bad.txt"), "fine\nnot \xff fine\n");
  try {
    prepare_dataset(options(0.1), {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("zz_bad.txt"), std::string::npos) << e.what();
  }
  for (const char* name : {"out_train.bin", "out_train.idx", "out_val.bin", "out_val.idx"}) {
    EXPECT_FALSE(std::filesystem::exists(dir_.file(name))) << name;
  }
  PrepareOptions bad = options(1.5);
  EXPECT_THROW(prepare_dataset(bad, {}), Error);
  bad = options(0);
  bad.eos_token = "<nope>";
  EXPECT_THROW(prepare_dataset(bad, {}), Error);
}

// A dataset knows its tokenizer: a run with another tokenizer of the same size is refused, naming both; a
// dataset from elsewhere (no record) is read whole and its ids checked against the vocabulary.
TEST_F(PrepareTest, ADatasetRecordsItsTokenizerAndARunWithAnotherIsRefused) {
  const PrepareReport report = prepare_dataset(options(0), {});
  const Tokenizer tokenizer = Tokenizer::load(dir_.file("tokenizer.json"));
  const std::optional<DatasetProvenance> p = read_dataset_provenance(report.train_prefix);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->tokenizer_fingerprint, tokenizer.fingerprint());
  EXPECT_EQ(p->tokens, report.train_tokens);
  EXPECT_EQ(check_dataset(report.train_prefix, tokenizer, "tok.json", 300, 1 << 20), "");

  // Another tokenizer of the same vocabulary size: trained on other text.
  std::string other_text;
  for (int i = 0; i < 200; ++i)
    other_text += "Quite another corpus: alpha beta gamma delta epsilon " + std::to_string(i * 7919) + "\n";
  test::write_bytes(dir_.file("other.txt"), other_text);
  BpeTrainOptions other_options;
  other_options.vocab_size = 300;
  train_byte_level_bpe({dir_.file("other.txt")}, other_options, dir_.file("other.json"));
  const Tokenizer other = Tokenizer::load(dir_.file("other.json"));
  ASSERT_EQ(other.vocab_size(), tokenizer.vocab_size());
  ASSERT_NE(other.fingerprint(), tokenizer.fingerprint());
  try {
    check_dataset(report.train_prefix, other, dir_.file("other.json"), 300, 1 << 20);
    FAIL() << "a dataset of another tokenizer was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(dir_.file("tokenizer.json")), std::string::npos) << message;
    EXPECT_NE(message.find(dir_.file("other.json")), std::string::npos) << message;
    EXPECT_NE(message.find(report.train_prefix), std::string::npos) << message;
  }
  // A model vocabulary smaller than the dataset's largest id.
  EXPECT_THROW(check_dataset(report.train_prefix, tokenizer, "tok.json", p->max_token_id, 1 << 20), Error);
}

TEST_F(PrepareTest, ADatasetWithoutARecordIsReadWholeAgainstTheVocabulary) {
  const std::string prefix = dir_.file("foreign");
  {
    IndexedDatasetWriter writer(prefix, TokenDType::UInt16);
    const int32_t document[] = {5, 17, 299, 2};
    writer.add_document(document, 4);
    writer.finish();
  }
  const Tokenizer tokenizer = Tokenizer::load(dir_.file("tokenizer.json"));
  EXPECT_FALSE(read_dataset_provenance(prefix).has_value());
  EXPECT_NE(check_dataset(prefix, tokenizer, "tok.json", 300, 1 << 20).find("no record"), std::string::npos);
  try {
    check_dataset(prefix, tokenizer, "tok.json", 299, 1 << 20);
    FAIL() << "token 299 fits no vocabulary of 299";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("299"), std::string::npos) << e.what();
  }
}

TEST_F(PrepareTest, ARecordOfADatasetChangedSinceIsNotTrusted) {
  const PrepareReport report = prepare_dataset(options(0), {});
  ASSERT_TRUE(read_dataset_provenance(report.train_prefix).has_value());
  std::string bin = test::read_bytes(report.train_prefix + ".bin");
  bin[0] = char(bin[0] ^ 1);
  test::write_bytes(report.train_prefix + ".bin", bin + "xx");
  EXPECT_FALSE(read_dataset_provenance(report.train_prefix).has_value());
}

}  // namespace
}  // namespace zaya
