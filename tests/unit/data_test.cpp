// Indexed datasets (Megatron's format) and the loader: interoperability, validation, packing, order,
// mixtures and exact resume.

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "data/indexed_dataset.h"
#include "data/loader.h"
#include "data/permutation.h"
#include "io/atomic_file.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

std::vector<int32_t> read_document(const IndexedDataset& data, int64_t document) {
  std::vector<int32_t> out;
  for (int64_t s = data.document_start(document); s < data.document_start(document + 1); ++s) {
    std::vector<int32_t> tokens(static_cast<size_t>(data.sequence_length(s)));
    data.read(s, 0, data.sequence_length(s), tokens.data());
    out.insert(out.end(), tokens.begin(), tokens.end());
  }
  return out;
}

TEST(IndexedDataset, ReadsWhatMegatronWrote) {
  const nlohmann::json expected =
      nlohmann::json::parse(read_text_file(test::fixture("data/megatron_expected.json")));
  for (const char* name : {"megatron_uint16", "megatron_int32"}) {
    const IndexedDataset data(test::fixture(std::string("data/") + name));
    const auto& documents = expected[name];
    ASSERT_EQ(data.document_count(), int64_t(documents.size())) << name;
    int64_t sequence = 0;
    for (size_t d = 0; d < documents.size(); ++d) {
      std::vector<int32_t> want;
      for (const auto& sentence : documents[d]) {
        EXPECT_EQ(data.sequence_length(sequence++), int64_t(sentence.size()));
        for (const auto& token : sentence) want.push_back(token.get<int32_t>());
      }
      EXPECT_EQ(read_document(data, int64_t(d)), want) << name << " document " << d;
    }
  }
  EXPECT_EQ(IndexedDataset(test::fixture("data/megatron_uint16")).dtype(), TokenDType::UInt16);
  EXPECT_EQ(IndexedDataset(test::fixture("data/megatron_int32")).dtype(), TokenDType::Int32);
}

std::vector<std::vector<int32_t>> write_documents(const std::string& prefix, int count, int32_t vocab,
                                                  uint32_t salt) {
  std::vector<std::vector<int32_t>> documents;
  IndexedDatasetWriter writer(prefix, token_dtype_for_vocab(vocab));
  for (int d = 0; d < count; ++d) {
    std::vector<int32_t> doc;
    const int length = 1 + int((uint32_t(d) * 2654435761u + salt) % 37);
    for (int i = 0; i < length; ++i)
      doc.push_back(int32_t((uint32_t(d * 131 + i * 7) + salt) % uint32_t(vocab)));
    writer.add_document(doc.data(), int64_t(doc.size()));
    documents.push_back(doc);
  }
  writer.finish();
  return documents;
}

TEST(IndexedDataset, WritesWhatItReads) {
  test::TempDir dir;
  for (int32_t vocab : {1000, 100000}) {
    const std::string prefix = dir.file("d" + std::to_string(vocab));
    const auto documents = write_documents(prefix, 50, vocab, 3);
    const IndexedDataset data(prefix);
    EXPECT_EQ(data.dtype(), vocab < 65500 ? TokenDType::UInt16 : TokenDType::Int32);
    ASSERT_EQ(data.document_count(), 50);
    for (int d = 0; d < 50; ++d) EXPECT_EQ(read_document(data, d), documents[size_t(d)]);
  }
  // An unfinished writer leaves nothing under the final names.
  {
    IndexedDatasetWriter writer(dir.file("partial"), TokenDType::UInt16);
    const int32_t tokens[3] = {1, 2, 3};
    writer.add_document(tokens, 3);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("partial.bin")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("partial.idx")));
}

TEST(IndexedDataset, ChecksTokensAgainstTheVocabulary) {
  test::TempDir dir;
  write_documents(dir.file("d"), 5, 1000, 1);
  const IndexedDataset data(dir.file("d"));
  std::vector<int32_t> out(64);
  try {
    data.read(0, 0, data.sequence_length(0), out.data(), 1);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the vocabulary"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("d.bin"), std::string::npos) << e.what();
  }
}

struct Corruption {
  const char* label;
  std::function<void(std::string& idx, std::string& bin)> apply;
  const char* fragment;
};

class CorruptDataset : public ::testing::TestWithParam<Corruption> {};

TEST_P(CorruptDataset, IsAClearErrorNamingTheFile) {
  test::TempDir dir;
  write_documents(dir.file("d"), 6, 1000, 2);
  std::string idx = test::read_bytes(dir.file("d.idx")), bin = test::read_bytes(dir.file("d.bin"));
  GetParam().apply(idx, bin);
  test::write_bytes(dir.file("d.idx"), idx);
  test::write_bytes(dir.file("d.bin"), bin);
  try {
    IndexedDataset data(dir.file("d"));
    FAIL() << GetParam().label;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().fragment), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.path()), std::string::npos) << e.what();
  }
}

void put_u64(std::string& s, size_t at, uint64_t value) {
  std::memcpy(s.data() + at, &value, 8);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CorruptDataset,
    ::testing::Values(
        Corruption{"truncated index", [](std::string& idx, std::string&) { idx.resize(20); },
                   "shorter than its header"},
        Corruption{"bad magic", [](std::string& idx, std::string&) { idx[0] = 'X'; }, "MMIDIDX"},
        Corruption{"version 2", [](std::string& idx, std::string&) { put_u64(idx, 9, 2); }, "version 2"},
        Corruption{"float tokens", [](std::string& idx, std::string&) { idx[17] = 7; },
                   "not an integer type"},
        Corruption{"counts lie", [](std::string& idx, std::string&) { put_u64(idx, 18, 7); }, "need"},
        Corruption{"huge counts", [](std::string& idx, std::string&) { put_u64(idx, 18, ~uint64_t(0) / 2); },
                   "more than the file holds"},
        Corruption{"index cut short", [](std::string& idx, std::string&) { idx.resize(idx.size() - 8); },
                   "need"},
        Corruption{"data cut short", [](std::string&, std::string& bin) { bin.resize(bin.size() - 2); },
                   "data file has"},
        Corruption{"data too long", [](std::string&, std::string& bin) { bin += "xx"; }, "data file has"},
        Corruption{"negative length",
                   [](std::string& idx, std::string&) {
                     const int32_t negative = -5;
                     std::memcpy(idx.data() + 34 + 4, &negative, 4);
                   },
                   "negative length"},
        Corruption{"pointer off", [](std::string& idx, std::string&) { put_u64(idx, 34 + 6 * 4 + 8 * 2, 2); },
                   "starts at byte"},
        Corruption{"document index off",
                   [](std::string& idx, std::string&) { put_u64(idx, 34 + 6 * 12 + 8 * 3, 1); },
                   "out of order"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(IndexedDataset, MissingFilesAreNamed) {
  test::TempDir dir;
  write_documents(dir.file("d"), 3, 100, 1);
  std::filesystem::remove(dir.file("d.bin"));
  try {
    IndexedDataset data(dir.file("d"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("d.bin"), std::string::npos) << e.what();
  }
}

TEST(Permutation, IsABijectionForAnySize) {
  for (uint64_t n : {1ull, 2ull, 3ull, 7ull, 64ull, 100ull, 1000ull, 4097ull}) {
    const Permutation perm(n, 42, 9);
    std::set<uint64_t> seen;
    for (uint64_t i = 0; i < n; ++i) seen.insert(perm(i));
    EXPECT_EQ(seen.size(), n);
    EXPECT_LT(*seen.rbegin(), n);
  }
  const Permutation a(1000, 1, 0), b(1000, 2, 0);
  int same = 0;
  for (uint64_t i = 0; i < 1000; ++i) same += a(i) == b(i);
  EXPECT_LT(same, 20);
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    first_ = write_documents(dir_.file("a"), 30, 500, 1);
    second_ = write_documents(dir_.file("b"), 20, 500, 7);
  }
  StageData stage(int64_t seq_len, double weight_a, double weight_b) const {
    StageData out{seq_len, {{dir_.file("a"), weight_a}}};
    if (weight_b > 0) out.mixture.push_back({dir_.file("b"), weight_b});
    return out;
  }
  static std::vector<int32_t> draw(DataLoader& loader, int64_t count) {
    std::vector<int32_t> out(static_cast<size_t>(count * (loader.seq_len() + 1)));
    loader.next(count, 0, count, out.data());
    return out;
  }
  test::TempDir dir_;
  std::vector<std::vector<int32_t>> first_, second_;
};

// One epoch of windows covers the dataset: the windows' first seq_len tokens, in window order, are a
// rotation of the shuffled documents, and consecutive windows of one epoch share their boundary token.
TEST_F(LoaderTest, WindowsTileTheDocumentsOncePerEpoch) {
  int64_t total = 0;
  std::multiset<int32_t> tokens;
  for (const auto& doc : first_) {
    total += int64_t(doc.size());
    tokens.insert(doc.begin(), doc.end());
  }
  const int64_t seq = 8, windows = (total - 1) / seq;
  DataLoader loader({stage(seq, 1, 0)}, 3, 500);
  const std::vector<int32_t> drawn = draw(loader, windows);
  std::multiset<int32_t> targets;  // every window's last seq_len tokens: each dataset token at most once
  for (int64_t w = 0; w < windows; ++w)
    targets.insert(drawn.begin() + w * (seq + 1) + 1, drawn.begin() + (w + 1) * (seq + 1));
  for (int32_t token : targets) EXPECT_GE(tokens.count(token), targets.count(token));
  // All tokens but the stream's first and the (total - 1) % seq left over at its end are targets.
  EXPECT_EQ(int64_t(tokens.size() - targets.size()), (total - 1) % seq + 1);
}

TEST_F(LoaderTest, OrderDependsOnTheSeedAndNothingElse) {
  DataLoader a({stage(16, 1, 1)}, 5, 500), b({stage(16, 1, 1)}, 5, 500), c({stage(16, 1, 1)}, 6, 500);
  const auto first = draw(a, 40);
  EXPECT_EQ(first, draw(b, 40));
  EXPECT_NE(first, draw(c, 40));
}

// The global batch is the same however it is split over ranks, and a restored state continues exactly.
TEST_F(LoaderTest, RankSlicesAndResumeGiveTheSameSamples) {
  DataLoader whole({stage(12, 2, 1), stage(20, 1, 3)}, 1, 500);
  const auto reference = draw(whole, 64);
  for (int ranks : {2, 4}) {
    std::vector<int32_t> joined;
    for (int r = 0; r < ranks; ++r) {
      DataLoader part({stage(12, 2, 1), stage(20, 1, 3)}, 1, 500);
      std::vector<int32_t> slice(static_cast<size_t>(64 / ranks * 13));
      part.next(64, r * 64 / ranks, 64 / ranks, slice.data());
      joined.insert(joined.end(), slice.begin(), slice.end());
      EXPECT_EQ(part.state().samples, 64);
    }
    EXPECT_EQ(joined, reference);
  }

  DataLoader run({stage(12, 2, 1), stage(20, 1, 3)}, 1, 500);
  draw(run, 100);  // past an epoch of both datasets
  run.start_stage(1);
  draw(run, 30);
  const LoaderState saved = run.state();
  const auto continued = draw(run, 50);
  DataLoader resumed({stage(12, 2, 1), stage(20, 1, 3)}, 1, 500);
  resumed.restore(saved);
  EXPECT_EQ(draw(resumed, 50), continued);
  EXPECT_EQ(resumed.seq_len(), 20);
  EXPECT_THROW(resumed.restore({5, 0, {}}), Error);
  EXPECT_THROW(resumed.restore({0, 0, {1}}), Error);
  LoaderState beyond = saved;
  beyond.samples = int64_t(1) << 60;  // the drawn counts no longer add up: it would seek for ever
  EXPECT_THROW(resumed.restore(beyond), Error);
}

TEST_F(LoaderTest, MixtureFollowsTheWeights) {
  DataLoader loader({stage(4, 0.7, 0.3)}, 2, 500);
  for (int n : {1, 10, 1000, 10000}) {
    draw(loader, n - loader.state().samples);
    EXPECT_NEAR(double(loader.state().drawn[0]), 0.7 * n, 1.0) << n;
    EXPECT_NEAR(double(loader.state().drawn[1]), 0.3 * n, 1.0) << n;
  }
}

TEST_F(LoaderTest, BadConfigurationsAreNamed) {
  EXPECT_THROW(DataLoader({stage(100000, 1, 0)}, 1, 500),
               Error);  // one window needs more tokens than there are
  EXPECT_THROW(DataLoader({}, 1, 500), Error);
  EXPECT_THROW(DataLoader({stage(8, -1, 0)}, 1, 500), Error);
  EXPECT_THROW(DataLoader({StageData{8, {{dir_.file("missing"), 1}}}}, 1, 500), Error);
  DataLoader small_vocab({stage(8, 1, 0)}, 1, 10);  // tokens go up to 499
  EXPECT_THROW(draw(small_vocab, 5), Error);
}

}  // namespace
}  // namespace zaya
