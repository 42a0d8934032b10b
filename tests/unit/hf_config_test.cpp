#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/hf_config.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

using nlohmann::json;

TEST(ZayaConfig, ReadsWhatTransformersWrote) {
  const ZayaConfig c = load_config(test::fixture("io/config_transformers.json"));
  EXPECT_EQ(c.vocab_size, 96);
  EXPECT_EQ(c.hidden_size, 24);
  EXPECT_EQ(c.num_hidden_layers, 3);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.num_experts, 3);
  EXPECT_EQ(c.moe_intermediate_size, 16);
  EXPECT_EQ(c.router_hidden_size, 12);
  EXPECT_EQ(c.layer_types, (std::vector<std::string>{"hybrid", "hybrid_sliding", "hybrid"}));
  EXPECT_EQ(c.sliding_window, 5);
  EXPECT_EQ(c.max_position_embeddings, 256);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.initializer_range, 0.05);
  EXPECT_EQ(c.eos_token_id, (std::vector<int64_t>{1, 5}));
  EXPECT_TRUE(c.eos_token_id_is_list);
  EXPECT_EQ(c.cca_time0, 3);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_TRUE(c.lm_head_bias);
  EXPECT_DOUBLE_EQ(c.rope_parameters.at("hybrid").rope_theta, 12345.0);
  EXPECT_DOUBLE_EQ(c.rope_parameters.at("hybrid_sliding").partial_rotary_factor, 1.0);
}

// Written back, a model's config says the same as transformers' file: every key, every value.
TEST(ZayaConfig, RoundTripsTransformersFileWithoutLosingAKey) {
  const std::string original = read_text_file(test::fixture("io/sharded_model/config.json"));
  const ZayaConfig c = parse_config(original, "config.json");
  EXPECT_EQ(json::parse(config_to_json(c)), json::parse(original)) << config_to_json(c);

  // A bare ZayaConfig.save_pretrained has no "architectures" or "dtype"; a model's config has both.
  const std::string bare = read_text_file(test::fixture("io/config_transformers.json"));
  json got = json::parse(config_to_json(parse_config(bare, "config_transformers.json")));
  EXPECT_EQ(got["architectures"], json::array({"ZayaForCausalLM"}));
  EXPECT_EQ(got["dtype"], "float32");
  got.erase("architectures");
  got.erase("dtype");
  EXPECT_EQ(got, json::parse(bare));
}

// An empty object means transformers' defaults (configuration_zaya.py).
TEST(ZayaConfig, DefaultsMatchTransformers) {
  const ZayaConfig c = parse_config("{}", "empty.json");
  EXPECT_EQ(c.vocab_size, 262272);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_hidden_layers, 40);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.moe_intermediate_size, 2048);
  EXPECT_EQ(c.num_experts, 16);
  EXPECT_EQ(c.router_hidden_size, 256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.layer_types.size(), 40u);
  EXPECT_EQ(c.layer_types[7], "hybrid");
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_EQ(c.bos_token_id, 2);
  EXPECT_EQ(c.eos_token_id, std::vector<int64_t>{106});
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.sliding_window.has_value());
  EXPECT_DOUBLE_EQ(c.rope_parameters.at("hybrid").rope_theta, 5e6);
  EXPECT_DOUBLE_EQ(c.rope_parameters.at("hybrid").partial_rotary_factor, 0.5);
  EXPECT_DOUBLE_EQ(c.rope_parameters.at("hybrid_sliding").rope_theta, 1e4);
}

TEST(ZayaConfig, KeepsUnknownKeys) {
  const ZayaConfig c = parse_config(R"({"my_tool_setting": [1, 2], "transformers_version": "5.24.0"})", "x");
  const json out = json::parse(config_to_json(c));
  EXPECT_EQ(out["my_tool_setting"], json::array({1, 2}));
  EXPECT_EQ(out["transformers_version"], "5.24.0");
}

struct BadConfig {
  const char* json_text;
  const char* field;
};

class InvalidConfig : public ::testing::TestWithParam<BadConfig> {};

TEST_P(InvalidConfig, NamesTheFileAndField) {
  try {
    parse_config(GetParam().json_text, "my/config.json");
    FAIL() << "accepted " << GetParam().json_text;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("my/config.json"), std::string::npos) << message;
    EXPECT_NE(message.find(std::string("field '") + GetParam().field), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, InvalidConfig,
    ::testing::Values(
        BadConfig{R"({"hidden_size": "big"})", "hidden_size"},
        BadConfig{R"({"hidden_size": 64.5})", "hidden_size"},
        BadConfig{R"({"num_hidden_layers": 0})", "num_hidden_layers"},
        BadConfig{R"({"num_attention_heads": 6, "num_key_value_heads": 4})", "num_key_value_heads"},
        BadConfig{R"({"num_hidden_layers": 2, "layer_types": ["hybrid"]})", "layer_types"},
        BadConfig{R"({"num_hidden_layers": 1, "layer_types": ["mamba"]})", "layer_types"},
        BadConfig{R"({"num_hidden_layers": 1, "layer_types": ["hybrid_sliding"]})", "sliding_window"},
        BadConfig{R"({"num_experts_per_tok": 2})", "num_experts_per_tok"},
        BadConfig{R"({"tie_word_embeddings": 1})", "tie_word_embeddings"},
        BadConfig{R"({"model_type": "llama"})", "model_type"},
        BadConfig{R"({"hidden_act": "relu"})", "hidden_act"},
        BadConfig{R"({"vocab_size": 10, "bos_token_id": 20})", "bos_token_id"},
        BadConfig{R"({"rope_parameters": {"hybrid": {"rope_theta": -1}}})", "rope_parameters.hybrid"},
        BadConfig{R"({"rope_parameters": {"hybrid": {"rope_type": "yarn", "rope_theta": 1}}})",
                  "rope_parameters.hybrid"},
        BadConfig{R"({"rope_parameters": {"hybrid_sliding": {"rope_theta": 1}}})", "rope_parameters"},
        BadConfig{R"({"dtype": "int8"})", "dtype"},
        // Sizes zaya cannot count.
        BadConfig{R"({"hidden_size": 9223372036854775807})", "hidden_size"},
        BadConfig{R"({"vocab_size": 18446744073709551615})", "vocab_size"},
        BadConfig{R"({"hidden_size": 1073741824, "num_experts": 1048576})", "hidden_size"},
        // Found by the fuzzer: the default layer types were made before the count was checked (110 GB).
        BadConfig{R"({"num_hidden_layers": 3444444510})", "num_hidden_layers"},
        BadConfig{R"({"num_hidden_layers": 65537})", "num_hidden_layers"}));

TEST(ZayaConfig, RejectsFilesThatAreNotConfigs) {
  EXPECT_THROW(parse_config("[1]", "x.json"), Error);
  EXPECT_THROW(parse_config("{", "x.json"), Error);
  EXPECT_THROW(parse_config(R"({"rms_norm_eps": 1e999})", "x.json"), Error);  // no infinity from JSON
  EXPECT_THROW(load_config("/nonexistent/config.json"), Error);
}

}  // namespace
}  // namespace zaya
