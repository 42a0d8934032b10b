// The tokenizer against the Python `tokenizers` library (0.23.3): the fixtures of tests/fixtures/tokenizer/
// (tools/reference/gen_tokenizer_fixtures.py) hold five tokenizer.json files, a 1 MB mixed corpus cut into
// documents of whole lines, and the ids tokenizers gives each document, plus edge cases and decodes.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/threads.h"
#include "io/safetensors.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

using nlohmann::json;

template <class T>
std::vector<T> read_tensor(const SafetensorsFile& file, const std::string& name) {
  const SafetensorsEntry* entry = file.find(name);
  if (!entry) throw std::runtime_error("missing tensor " + name);
  const TensorView view = file.view(*entry);
  std::vector<T> out(static_cast<size_t>(view.numel()));
  std::memcpy(out.data(), view.data, out.size() * sizeof(T));
  return out;
}

struct Reference {
  SafetensorsFile expected{test::fixture("tokenizer/expected.safetensors")};
  json cases = json::parse(test::read_bytes(test::fixture("tokenizer/cases.json")));
  std::string corpus = test::read_bytes(test::fixture("tokenizer/corpus.txt"));
  std::vector<int64_t> chunk_bytes = read_tensor<int64_t>(expected, "chunk_bytes");  // n + 1 offsets

  std::string_view chunk(size_t i) const {
    return std::string_view(corpus).substr(size_t(chunk_bytes[i]),
                                           size_t(chunk_bytes[i + 1] - chunk_bytes[i]));
  }
};

const Reference& reference() {
  static const Reference instance;
  return instance;
}

Tokenizer load(const std::string& name) {
  return Tokenizer::load(test::fixture("tokenizer/" + name + ".json"));
}

std::string show(const std::vector<int32_t>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) out += std::to_string(ids[i]) + " ";
  return out;
}

// Every document of the corpus that the fixture covers, encoded one by one, gives tokenizers' ids.
void expect_corpus_ids(const std::string& name, const Tokenizer& tokenizer) {
  const Reference& ref = reference();
  const auto ids = read_tensor<int32_t>(ref.expected, name + ".ids");
  const auto offsets = read_tensor<int64_t>(ref.expected, name + ".offsets");
  const size_t chunks = offsets.size() - 1;
  ASSERT_GT(chunks, 10u);
  size_t bytes = 0, failures = 0;
  for (size_t c = 0; c < chunks; ++c) {
    const std::vector<int32_t> want(ids.begin() + offsets[c], ids.begin() + offsets[c + 1]);
    const std::vector<int32_t> got = tokenizer.encode(ref.chunk(c));
    bytes += ref.chunk(c).size();
    if (got != want && failures++ < 3) {
      size_t first = 0;
      while (first < got.size() && first < want.size() && got[first] == want[first]) ++first;
      ADD_FAILURE() << name << " chunk " << c << ": first difference at token " << first << "\n  want "
                    << show(std::vector<int32_t>(want.begin() + long(first), want.end())) << "\n  got  "
                    << show(std::vector<int32_t>(got.begin() + long(std::min(first, got.size())), got.end()));
    }
  }
  EXPECT_EQ(failures, 0u) << name << ": " << failures << " of " << chunks << " documents differ";
  if (name == "byte_level" || name == "byte_fallback") {
    EXPECT_GT(bytes, size_t(1) << 20);
  }
}

void expect_corpus_ids(const std::string& name) {
  expect_corpus_ids(name, load(name));
}

TEST(TokenizerReference, ByteLevelLlama3Corpus) {
  expect_corpus_ids("byte_level");
}
TEST(TokenizerReference, ByteFallbackGemma3Corpus) {
  expect_corpus_ids("byte_fallback");
}
TEST(TokenizerReference, Gpt2Corpus) {
  expect_corpus_ids("gpt2");
}
TEST(TokenizerReference, MetaspaceCorpus) {
  expect_corpus_ids("metaspace");
}
TEST(TokenizerReference, Llama2Corpus) {
  expect_corpus_ids("llama2");
}

// A merge across a "▁" makes the model merge whole texts rather than "▁" piece by piece; the ids must not
// change. The merge joins byte 0x01, which the corpus does not contain, and its token takes the place of
// <0x00> (also absent) so that the added tokens keep their ids.
TEST(TokenizerReference, ByteFallbackCorpusMergedAsWholeTexts) {
  ASSERT_EQ(reference().corpus.find_first_of(std::string("\x00\x01", 2)), std::string::npos);
  json config = json::parse(test::read_bytes(test::fixture("tokenizer/byte_fallback.json")));
  json& model = config["model"];
  model["vocab"]["<0x01>\u2581"] = model["vocab"]["<0x00>"];
  model["vocab"].erase("<0x00>");
  model["merges"].push_back({"<0x01>", "\u2581"});
  expect_corpus_ids("byte_fallback",
                    Tokenizer::parse(config.dump(), "byte_fallback.json with a crossing merge"));
}

class TokenizerCases : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerCases, EdgeCaseIds) {
  const Tokenizer tokenizer = load(GetParam());
  for (const json& c : reference().cases[GetParam()]["encode"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tokenizer.encode(text), c["ids"].get<std::vector<int32_t>>()) << "text: \"" << text << "\"";
  }
}

TEST_P(TokenizerCases, Decode) {
  const Tokenizer tokenizer = load(GetParam());
  for (const json& c : reference().cases[GetParam()]["decode"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const bool skip = c["skip_special_tokens"];
    EXPECT_EQ(tokenizer.decode(ids, skip), c["text"].get<std::string>())
        << "ids " << show(ids) << " skip " << skip;
  }
}

TEST_P(TokenizerCases, Vocabulary) {
  const Tokenizer tokenizer = load(GetParam());
  const json& cases = reference().cases[GetParam()];
  // The fixtures' ids are contiguous, so tokenizers' size with added tokens is also the largest id + 1.
  EXPECT_EQ(tokenizer.vocab_size(), cases["vocab_size"].get<int64_t>());
  for (const json& c : cases["token_to_id"]) {
    const std::string token = c["token"];
    if (c["id"].is_null()) {
      EXPECT_FALSE(tokenizer.token_to_id(token)) << token;
    } else {
      EXPECT_EQ(tokenizer.token_to_id(token), c["id"].get<int32_t>()) << token;
    }
  }
  for (const json& c : cases["id_to_token"]) {
    const int32_t id = c["id"];
    if (c["token"].is_null()) {
      EXPECT_FALSE(tokenizer.id_to_token(id)) << id;
    } else {
      EXPECT_EQ(tokenizer.id_to_token(id), c["token"].get<std::string>()) << id;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, TokenizerCases,
                         ::testing::Values("byte_level", "gpt2", "byte_fallback", "metaspace", "llama2"),
                         [](const auto& info) { return info.param; });

// One small tokenizer per component option (components.json): ids of tricky texts and decodes.
TEST(TokenizerReference, EveryComponentOption) {
  const json components = json::parse(test::read_bytes(test::fixture("tokenizer/components.json")));
  ASSERT_GT(components.size(), 40u);
  for (const json& component : components) {
    const std::string name = component["name"];
    const Tokenizer tokenizer = Tokenizer::parse(component["tokenizer"].dump(), name);
    for (const json& c : component["encode"]) {
      const std::string text = c["text"];
      EXPECT_EQ(tokenizer.encode(text), c["ids"].get<std::vector<int32_t>>())
          << name << ": \"" << text << "\"";
    }
    for (const json& c : component["decode"]) {
      const auto ids = c["ids"].get<std::vector<int32_t>>();
      const std::string decoded = tokenizer.decode(ids, c["skip_special_tokens"]);
      // tokenizers panics on some Strip decodes; zaya returns text instead.
      if (!c["text"].is_null()) {
        EXPECT_EQ(decoded, c["text"].get<std::string>()) << name << ": ids " << show(ids);
      }
    }
  }
}

// Decoding gives back the (normalized) document, except where an added token strips the spaces around it.
void expect_round_trip(const std::string& name, const std::vector<std::string>& stripping_tokens,
                       std::optional<unicode::NormalForm> form) {
  const Reference& ref = reference();
  const Tokenizer tokenizer = load(name);
  size_t checked = 0;
  std::string want;
  for (size_t c = 0; c + 1 < ref.chunk_bytes.size(); ++c) {
    const std::string_view text = ref.chunk(c);
    const bool strips =
        std::any_of(stripping_tokens.begin(), stripping_tokens.end(),
                    [&](const std::string& t) { return text.find(t) != std::string_view::npos; });
    if (strips) continue;
    if (form) {
      unicode::normalize(text, *form, want);
    } else {
      want.assign(text);
    }
    EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), want) << name << " document " << c;
    ++checked;
  }
  EXPECT_GT(checked, 100u);
}

TEST(TokenizerReference, DecodeRestoresText) {
  expect_round_trip("byte_fallback", {"[SEP]"}, std::nullopt);
  expect_round_trip("byte_level", {"[SEP]", "<|mask|>"}, unicode::NormalForm::nfc);
}

TEST(TokenizerReference, BatchEqualsSequentialForAnyThreadCount) {
  const Reference& ref = reference();
  const Tokenizer tokenizer = load("byte_level");
  std::vector<std::string_view> texts;
  for (size_t c = 0; c + 1 < ref.chunk_bytes.size(); ++c) texts.push_back(ref.chunk(c));
  std::vector<std::vector<int32_t>> sequential;
  for (const auto text : texts) sequential.push_back(tokenizer.encode(text));
  const int threads = num_threads();
  for (const int n : {1, 2, 3}) {
    set_num_threads(n);
    EXPECT_EQ(tokenizer.encode_batch(texts), sequential) << n << " threads";
  }
  set_num_threads(threads);
}

}  // namespace
}  // namespace zaya
