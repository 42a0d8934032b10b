#pragma once
// The Hugging Face `config.json` of a ZAYA model (model_type "zaya"): every field of transformers'
// ZayaConfig (transformers 5.24, configuration_zaya.py) with the same defaults. Keys we do not model
// (PreTrainedConfig's generic ones, a tool's own) are kept verbatim and written back, so nothing is lost.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zaya {

struct RopeParameters {
  std::string rope_type = "default";
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;  // transformers' default when the key is absent
};

inline constexpr std::string_view kLayerFull = "hybrid";
inline constexpr std::string_view kLayerSliding = "hybrid_sliding";

struct ZayaConfig {
  int64_t vocab_size = 262272;
  int64_t hidden_size = 2048;
  int64_t num_hidden_layers = 40;
  int64_t num_attention_heads = 8;
  int64_t num_key_value_heads = 2;
  std::string hidden_act = "silu";
  int64_t max_position_embeddings = 131072;
  double initializer_range = 0.02;
  double rms_norm_eps = 1e-5;
  bool use_cache = true;
  bool tie_word_embeddings = true;
  // Keyed by layer type. Defaults (ZayaConfig.__post_init__): hybrid theta 5e6, hybrid_sliding theta 1e4,
  // both with partial_rotary_factor 0.5.
  std::map<std::string, RopeParameters> rope_parameters = default_rope_parameters();
  std::optional<int64_t> sliding_window;
  double attention_dropout = 0.0;
  int64_t moe_intermediate_size = 2048;
  int64_t num_experts_per_tok = 1;
  int64_t num_experts = 16;
  bool output_router_logits = false;
  std::vector<std::string> layer_types;  // empty in a default-constructed config: "hybrid" for every layer
  std::optional<int64_t> pad_token_id = 0;
  std::optional<int64_t> bos_token_id = 2;
  std::vector<int64_t> eos_token_id = {106};
  bool eos_token_id_is_list = false;  // written back in the form it was read
  int64_t head_dim = 128;
  bool attention_bias = false;
  bool lm_head_bias = false;
  int64_t router_hidden_size = 256;
  int64_t cca_time0 = 2;
  int64_t cca_time1 = 2;
  std::string dtype = "float32";  // the dtype the weights are stored in ("float32", "bfloat16", "float16")
  std::string extra_json = "{}";  // the keys above do not cover, as a JSON object

  static std::map<std::string, RopeParameters> default_rope_parameters();

  const std::string& layer_type(int64_t layer) const { return layer_types.at(size_t(layer)); }
  // The (possibly defaulted) layer types filled in, so that layer_type(i) works for every layer; for a layer
  // count outside 1..kMaxLayers none are (validate_config reports the count).
  void fill_defaults();
};

// The first field that gives the weights of `a` and `b` another meaning (the shapes, the layer types and
// windows, RoPE, norms' epsilon, tied embeddings, biases, the activation, the special tokens' ids), as
// "field: A against B"; empty when they agree on all of them. Fields that do not (the context length,
// initializer_range, the stored dtype, keys zaya does not model) are not compared.
std::string model_difference(const ZayaConfig& a, const ZayaConfig& b);

// Parses and validates; `source` names the file in errors. Throws Error naming the file and field.
ZayaConfig parse_config(std::string_view json_text, const std::string& source);
ZayaConfig load_config(const std::string& path);
// Checks the combination of values (heads divisible by KV heads, layer_types length, ...), and that the
// sizes are ones zaya can count: each at most kMaxDimension, the parameters at most kMaxParameters (2^48,
// 30000 times ZAYA1's), so that no size derived from them overflows, and at most kMaxLayers layers (each
// layer has bookkeeping of its own, however small its tensors; ZAYA1 has 40 layers).
inline constexpr int64_t kMaxDimension = int64_t(1) << 31;
inline constexpr int64_t kMaxLayers = int64_t(1) << 16;
inline constexpr long double kMaxParameters = 0x1p48L;
void validate_config(const ZayaConfig& config, const std::string& source);
std::string config_to_json(const ZayaConfig& config);
void save_config(const ZayaConfig& config, const std::string& path);

}  // namespace zaya
