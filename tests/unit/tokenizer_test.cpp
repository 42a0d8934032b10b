// The tokenizer's contract beyond the reference fixtures: errors (invalid UTF-8, unsupported components,
// malformed files), added tokens, the document-boundary ids and thread safety.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "tokenizer/tokenizer.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

using nlohmann::json;

// A character-level BPE small enough to reason about: "a b" and "ab c" merge, anything else is <unk>.
json small_config() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null,
    "added_tokens": [
      {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 6, "content": "<eos>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 7, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
      {"id": 8, "content": "[M]", "single_word": false, "lstrip": true, "rstrip": false, "normalized": false, "special": false}
    ],
    "normalizer": null, "pre_tokenizer": null, "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "abc": 5}, "merges": ["a b", "ab c"]}
  })");
}

Tokenizer parse(const json& config, const std::string& name = "test.json") {
  return Tokenizer::parse(config.dump(), name);
}

std::string error_of(const json& config, const std::string& name = "test.json") {
  try {
    parse(config, name);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(TokenizerTest, MergesAndUnknown) {
  const Tokenizer tokenizer = parse(small_config());
  EXPECT_EQ(tokenizer.encode("abcab"), (std::vector<int32_t>{5, 4}));
  EXPECT_EQ(tokenizer.encode("axyb"), (std::vector<int32_t>{1, 0, 2}));  // x and y fuse into one <unk>
  EXPECT_EQ(tokenizer.encode(""), std::vector<int32_t>{});
  EXPECT_EQ(tokenizer.decode({5, 4}), "abc ab");  // no decoder: tokens joined by spaces
}

TEST(TokenizerTest, AddedTokensInText) {
  const Tokenizer tokenizer = parse(small_config());
  EXPECT_EQ(tokenizer.encode("ab<eos>c<s>"), (std::vector<int32_t>{4, 6, 3, 7}));
  EXPECT_EQ(tokenizer.encode("a  [M]b"), (std::vector<int32_t>{1, 8, 2}));  // lstrip takes the spaces
  EXPECT_EQ(tokenizer.decode({4, 6, 3, 7}, false), "ab <eos> c <s>");
  EXPECT_EQ(tokenizer.decode({4, 6, 3, 7, 8}, true), "ab c [M]");
  std::vector<int32_t> ids = {99};
  tokenizer.encode_append("c", ids);
  EXPECT_EQ(ids, (std::vector<int32_t>{99, 3}));
}

TEST(TokenizerTest, VocabularyQueries) {
  const Tokenizer tokenizer = parse(small_config());
  EXPECT_EQ(tokenizer.vocab_size(), 9);
  EXPECT_EQ(tokenizer.token_to_id("abc"), 5);
  EXPECT_EQ(tokenizer.token_to_id("[M]"), 8);
  EXPECT_FALSE(tokenizer.token_to_id("zz"));
  EXPECT_EQ(tokenizer.id_to_token(6), "<eos>");
  EXPECT_FALSE(tokenizer.id_to_token(42));
  EXPECT_FALSE(tokenizer.id_to_token(-1));
  EXPECT_EQ(tokenizer.decode({42, -3, 1}), "a");  // unknown ids are skipped, as tokenizers does
}

TEST(TokenizerTest, DocumentBoundaryIds) {
  const Tokenizer tokenizer = parse(small_config());
  EXPECT_EQ(tokenizer.eos_id(), 6);
  EXPECT_EQ(tokenizer.bos_id(), 7);
  EXPECT_FALSE(tokenizer.pad_id());
  json config = small_config();
  config["added_tokens"][1]["special"] = false;  // a non-special "<eos>" is ordinary text
  config["added_tokens"].push_back({{"id", 9}, {"content", "<|endoftext|>"}, {"special", true}});
  config["added_tokens"].push_back({{"id", 10}, {"content", "<pad>"}, {"special", true}});
  const Tokenizer other = parse(config);
  EXPECT_EQ(other.eos_id(), 9);
  EXPECT_EQ(other.pad_id(), 10);
}

TEST(TokenizerTest, AddedTokenIdsFollowTokenizersNotTheFile) {
  // tokenizers gives an added token the model's id for its content, else the next id after the model's
  // vocabulary, whatever "id" the file says.
  json config = small_config();
  config["added_tokens"] = json::array({{{"id", 77}, {"content", "abc"}, {"special", true}},
                                        {{"id", 78}, {"content", "<x>"}, {"special", true}}});
  const Tokenizer tokenizer = parse(config);
  EXPECT_EQ(tokenizer.token_to_id("abc"), 5);
  EXPECT_EQ(tokenizer.token_to_id("<x>"), 6);
  EXPECT_EQ(tokenizer.encode("<x>abc"), (std::vector<int32_t>{6, 5}));
}

TEST(TokenizerTest, InvalidUtf8IsAnErrorWithItsOffset) {
  const Tokenizer tokenizer = parse(small_config());
  const auto message = [&](const std::string& text) {
    try {
      tokenizer.encode(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("ab\xff"), "invalid UTF-8 at byte 2");
  EXPECT_EQ(message("\xC0\xAF"), "invalid UTF-8 at byte 0");             // overlong
  EXPECT_EQ(message("abc\xED\xA0\x80"), "invalid UTF-8 at byte 3");      // surrogate
  EXPECT_EQ(message("abcdefghij\xE2\x82"), "invalid UTF-8 at byte 10");  // truncated
  EXPECT_EQ(message("a\xF4\x90\x80\x80"), "invalid UTF-8 at byte 1");    // above U+10FFFF
  EXPECT_EQ(message("ok \xE2\x82\xAC"), "no error");
  try {
    tokenizer.encode_batch({"abc", "a\x80", "\xff"});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "text 1: invalid UTF-8 at byte 1");
  }
}

TEST(TokenizerTest, UnsupportedComponentsAreNamed) {
  json config = small_config();
  config["model"]["type"] = "WordPiece";
  EXPECT_EQ(error_of(config, "wp.json"), "wp.json: field 'model.type': not supported: WordPiece");

  config = small_config();
  config["pre_tokenizer"] = json::parse(
      R"({"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true},
          {"type": "BertPreTokenizer"}]})");
  EXPECT_EQ(error_of(config),
            "test.json: field 'pre_tokenizer.pretokenizers[1].type': not supported: BertPreTokenizer");

  config = small_config();
  config["normalizer"] = {{"type", "Precompiled"}, {"precompiled_charsmap", "AAAA"}};
  EXPECT_EQ(error_of(config), "test.json: field 'normalizer.type': not supported: Precompiled");

  config = small_config();
  config["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}};
  EXPECT_EQ(error_of(config), "test.json: field 'decoder.type': not supported: WordPiece");

  config = small_config();
  config["model"]["dropout"] = 0.1;
  EXPECT_EQ(error_of(config),
            "test.json: field 'model.dropout': not supported: BPE dropout (must be null or 0)");
  config["model"]["dropout"] = 0.0;
  EXPECT_EQ(error_of(config), "no error");
}

TEST(TokenizerTest, MalformedFilesAreNamed) {
  EXPECT_EQ(error_of(json::array()), "test.json: expected a JSON object");
  try {
    Tokenizer::parse("{\"model\": ", "broken.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("broken.json: invalid JSON: ", 0), 0u) << e.what();
  }
  try {
    Tokenizer::load("/nonexistent/tokenizer.json");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.file_name(), "/nonexistent/tokenizer.json");
  }

  json config = small_config();
  config["model"]["merges"] = {"a b", "ab x"};
  EXPECT_EQ(error_of(config), "test.json: field 'model.merges[1]': token \"x\" is not in the vocabulary");
  config["model"]["merges"] = {"a b c"};
  EXPECT_EQ(error_of(config), "test.json: field 'model.merges[0]': expected \"left right\", found \"a b c\"");
  config = small_config();
  config["model"].erase("vocab");
  EXPECT_EQ(error_of(config), "test.json: field 'model.vocab': missing");
  config = small_config();
  config["model"]["vocab"]["a"] = -1;
  EXPECT_EQ(error_of(config), "test.json: field 'model.vocab.a': expected an id between 0 and 2^31 - 1");
  config = small_config();
  config["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_EQ(error_of(config).rfind(
                "test.json: field 'pre_tokenizer.pattern.Regex': invalid regex /(unclosed/: ", 0),
            0u);
  config["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Sideways"}};
  EXPECT_EQ(error_of(config),
            "test.json: field 'pre_tokenizer.behavior': unknown split behavior \"Sideways\"");
  config["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
  EXPECT_EQ(error_of(config),
            "test.json: field 'pre_tokenizer.replacement': expected a single character, found \"ab\"");
  config = small_config();
  config["added_tokens"][1]["content"] = 5;
  EXPECT_EQ(error_of(config),
            "test.json: field 'added_tokens[1].content': expected a string, found a number");
  config = small_config();
  json nested = {{"type", "Lowercase"}};
  for (int i = 0; i < 100; ++i) nested = {{"type", "Sequence"}, {"normalizers", {nested}}};
  config["normalizer"] = nested;
  EXPECT_NE(error_of(config).find("test.json: JSON nested deeper than 64 levels"), std::string::npos)
      << "components nest through Sequence, and reading them recurses";
  config = small_config();
  config["version"] = "2.0";
  EXPECT_EQ(error_of(config), "test.json: field 'version': unknown tokenizer version");
}

TEST(TokenizerTest, ConcurrentEncodeIsConsistent) {
  const Tokenizer tokenizer = Tokenizer::load(test::fixture("tokenizer/byte_level.json"));
  const std::string corpus = test::read_bytes(test::fixture("tokenizer/corpus.txt")).substr(0, 200000);
  const std::vector<int32_t> want = tokenizer.encode(corpus);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] { got[t] = tokenizer.encode(corpus); });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& ids : got) EXPECT_EQ(ids, want);
}

}  // namespace
}  // namespace zaya
