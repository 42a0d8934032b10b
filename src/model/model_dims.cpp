#include "model/model_dims.h"

#include <algorithm>

#include "backend/op_check.h"
#include "core/error.h"

namespace zaya {

ModelDims model_dims(const ZayaConfig& c) {
  ModelDims d;
  d.vocab = c.vocab_size;
  d.hidden = c.hidden_size;
  d.layers = c.num_hidden_layers;
  d.heads = c.num_attention_heads;
  d.kv_heads = c.num_key_value_heads;
  d.head_dim = c.head_dim;
  d.experts = c.num_experts;
  d.intermediate = c.moe_intermediate_size;
  d.router = c.router_hidden_size;
  d.conv_time0 = c.cca_time0;
  d.conv_time1 = c.cca_time1;
  d.rms_eps = float(c.rms_norm_eps);
  d.tied_embeddings = c.tie_word_embeddings;
  d.lm_head_bias = c.lm_head_bias;
  d.attention_bias = c.attention_bias;
  d.pad_token_id = c.pad_token_id ? int32_t(*c.pad_token_id) : -1;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string& type = c.layer_type(i);
    const RopeParameters& rope = c.rope_parameters.at(type);
    LayerDims layer;
    layer.rotary_dim = int64_t(double(c.head_dim) * rope.partial_rotary_factor);
    layer.rope_theta = rope.rope_theta;
    layer.window = type == kLayerSliding ? *c.sliding_window : 0;
    d.layer.push_back(layer);
  }
  return d;
}

OpCheckShape op_check_shape(const ModelDims& dims, int64_t batch, int64_t seq) {
  OpCheckShape shape;
  shape.batch = batch;
  shape.seq = seq;
  shape.hidden = dims.hidden;
  shape.heads = dims.heads;
  shape.kv_heads = dims.kv_heads;
  shape.head_dim = dims.head_dim;
  shape.conv_time0 = dims.conv_time0;
  shape.conv_time1 = dims.conv_time1;
  if (!dims.layer.empty()) {
    shape.rotary_dim = dims.layer[0].rotary_dim;
    shape.rope_theta = dims.layer[0].rope_theta;
  }
  for (const LayerDims& layer : dims.layer) shape.window = std::max(shape.window, layer.window);
  shape.router = dims.router;
  shape.experts = dims.experts;
  shape.intermediate = dims.intermediate;
  shape.vocab = dims.vocab;
  // The rows of logits a CPU training step scores at once: ZayaModel::head's chunks of about 2^24 logits
  // (Ops::loss_chunk_logits on the CPU), a multiple of 16 rows and at least 16.
  shape.loss_rows = std::max<int64_t>(16, (int64_t(1) << 24) / std::max<int64_t>(1, dims.vocab) / 16 * 16);
  shape.rms_eps = dims.rms_eps;
  shape.pad_token_id = dims.pad_token_id;
  return shape;
}

std::vector<ProductShape> dominant_products(const ModelDims& dims, int64_t rows) {
  constexpr int64_t kMostRows = 1024, kMostVocabulary = 8192;
  const int64_t cut = std::clamp<int64_t>(rows, 1, kMostRows);
  const int64_t expert_rows = std::clamp<int64_t>(rows / std::max<int64_t>(1, dims.experts), 1, kMostRows);
  return {{expert_rows, 2 * dims.intermediate, dims.hidden},
          {cut, dims.q_dim(), dims.hidden},
          {cut, std::min(dims.vocab, kMostVocabulary), dims.hidden}};
}

namespace {

ZayaConfig make_preset(int64_t vocab, int64_t hidden, int64_t layers, int64_t heads, int64_t kv_heads,
                       int64_t head_dim, int64_t experts, int64_t intermediate, int64_t router,
                       int64_t max_positions) {
  ZayaConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.num_experts = experts;
  c.moe_intermediate_size = intermediate;
  c.router_hidden_size = router;
  c.max_position_embeddings = max_positions;
  c.pad_token_id = 0;
  c.bos_token_id = 2;
  c.eos_token_id = {1};
  c.fill_defaults();
  return c;
}

}  // namespace

std::vector<std::string> preset_names() {
  return {"tiny", "small", "medium", "zaya1-base"};
}

ZayaConfig preset_config(const std::string& name) {
  ZayaConfig c;
  if (name == "tiny") {
    // Every feature at toy size, for tests: GQA, a sliding-window layer, experts and the skip route.
    c = make_preset(512, 64, 2, 4, 2, 16, 4, 64, 32, 1024);
    c.layer_types = {"hybrid", "hybrid_sliding"};
    c.sliding_window = 64;
    c.rope_parameters["hybrid"] = {"default", 10000.0, 0.5};
  } else if (name == "small") {
    // The CPU demo: a training step of 8k tokens takes about a second on 2 cores.
    c = make_preset(4096, 128, 4, 4, 2, 32, 8, 256, 32, 2048);
    c.rope_parameters["hybrid"] = {"default", 10000.0, 0.5};
  } else if (name == "medium") {
    // Benchmarks: the first shape where matrix products dominate a CPU step (hidden 1024, 8 layers, 8/2
    // heads of 128, 16 experts of 1024, router 128, vocabulary 32768).
    c = make_preset(32768, 1024, 8, 8, 2, 128, 16, 1024, 128, 4096);
    c.rope_parameters["hybrid"] = {"default", 10000.0, 0.5};
  } else if (name == "zaya1-base") {
    // Zyphra's ZAYA1-base: 40 blocks, hidden 2048, 8 query / 2 KV heads of 128, 16 experts top-1 with the
    // skip route, expert FFN 2048 -> 4096 (gate and up) -> 2048, router 256, Gemma 3 vocabulary, tied head.
    c = make_preset(262272, 2048, 40, 8, 2, 128, 16, 2048, 256, 32768);
    c.rope_parameters["hybrid"] = {"default", 1'000'000.0, 0.5};
  } else {
    throw Error("unknown preset '" + name + "' (expected tiny, small, medium or zaya1-base)");
  }
  validate_config(c, "preset " + name);
  return c;
}

}  // namespace zaya
