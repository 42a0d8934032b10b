#pragma once
// Model directories in Hugging Face's layout: config.json, model.safetensors (or shards + index),
// generation_config.json. What transformers saves loads here, and what we save transformers loads.

#include <cstdint>
#include <memory>
#include <string>

#include "io/hf_config.h"
#include "model/parameters.h"

namespace zaya {

struct LoadedModel {
  ZayaConfig config;
  std::unique_ptr<ParameterStore> params;
};

// Reads config.json and the weights (f32, bf16 or f16, converted to f32; with ExpertValues::Bf16 the expert
// weights rounded to bf16 instead, for a model that only runs forward in bf16). Every parameter must be
// present with its exact shape; a tensor the model does not have is an error too. Errors name the file and
// tensor. As transformers does, a tied config (tie_word_embeddings true or absent) with a stored
// lm_head.weight that differs from the embedding loads untied, with that head (config says so after).
LoadedModel load_model(const std::string& dir, ExpertValues expert_values = ExpertValues::F32);
// The weights of a model directory into an existing store of the same shape.
void load_weights(const std::string& dir, ParameterStore& params, bool tied_embeddings);

struct SaveOptions {
  std::string dtype = "float32";  // or "bfloat16"
  size_t max_shard_bytes = size_t(5) << 30;
};

// Writes config.json, generation_config.json and the weights (all parameters and the balancing biases;
// the tied lm_head is not stored, as transformers does).
void save_model(const ZayaConfig& config, const ParameterStore& params, const std::string& dir,
                const SaveOptions& options = {});
// The names of the files save_model writes for a store of this table (known before the model is read or
// made: an output directory is checked against them first).
std::vector<std::string> model_file_names(const ParameterTable& table, const SaveOptions& options = {});
// generation_config.json: the special token ids, as transformers writes it for a model config.
void write_generation_config(const ZayaConfig& config, const std::string& path);

// transformers' _init_weights: normal(0, initializer_range) for linear, convolution, embedding and expert
// weights (the padding row of the embedding zeroed), ones for norms and scales, zeros for biases and key
// temperatures, balancing biases 0 with -1 on the skip route. Counter-based: independent of threads.
// router_fan_in draws the router's matrices with std 1/sqrt(fan_in) instead: through its three small
// layers the reference init leaves router logits that barely depend on the token (differences of about
// 1e-4 at R = 32), so that the first updates, or the balancing biases, send every token to one expert.
void init_parameters(ParameterStore& params, double initializer_range, uint64_t seed,
                     bool router_fan_in = false);

}  // namespace zaya
