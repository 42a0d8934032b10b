#pragma once
// The sizes the model code works with, derived once from a validated ZayaConfig, and the named presets.

#include <cstdint>
#include <string>
#include <vector>

#include "backend/precision_policy.h"
#include "io/hf_config.h"

namespace zaya {

struct OpCheckShape;

struct LayerDims {
  int64_t rotary_dim = 0;  // channels of each head that get RoPE (int(head_dim * partial_rotary_factor))
  double rope_theta = 10000.0;
  int64_t window = 0;  // sliding window in keys, 0 for full causal attention
};

struct ModelDims {
  int64_t vocab = 0, hidden = 0, layers = 0;
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t experts = 0, intermediate = 0, router = 0;
  int64_t conv_time0 = 0, conv_time1 = 0;
  float rms_eps = 1e-5f;
  bool tied_embeddings = true, lm_head_bias = false, attention_bias = false;
  int32_t pad_token_id = -1;  // -1: none
  std::vector<LayerDims> layer;

  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  int64_t conv_channels() const { return q_dim() + kv_dim(); }
  int64_t routes() const { return experts + 1; }  // the last route is the skip route
};

ModelDims model_dims(const ZayaConfig& config);

// The sizes the backend's ops take in a micro-batch of batch x seq tokens of this model, for check_ops
// (backend/op_check.h, which cannot see ModelDims: the backend sits below the model).
OpCheckShape op_check_shape(const ModelDims& dims, int64_t batch, int64_t seq);

// The products that take most of a pass's time over `rows` rows at once (a micro-batch's tokens, or the
// sequences of a decode step), for precision "auto" to measure: an expert's gate and up projection over its
// share of the rows, the attention's query projection, and the LM head; each cut to a size a CPU multiplies
// in milliseconds (at most 1024 rows, 8192 vocabulary rows), which keeps its kernels the same.
std::vector<ProductShape> dominant_products(const ModelDims& dims, int64_t rows);

// "tiny" (tests), "small" (the CPU demo), "zaya1-base" (the published shape). Throws Error for others.
ZayaConfig preset_config(const std::string& name);
std::vector<std::string> preset_names();

}  // namespace zaya
