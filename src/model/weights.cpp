#include "model/weights.h"

#include <unordered_map>

#include "core/error.h"

namespace zaya {

namespace {

std::string layer_prefix(int64_t layer) {
  return "model.layers." + std::to_string(layer) + ".";
}

const char* const kGateUp = "mlp.experts.gate_up_proj";
const char* const kDown = "mlp.experts.down_proj";

}  // namespace

ModelWeights bind_weights(const ParameterTable& table, const ModelDims& dims, float* base, bool experts) {
  std::unordered_map<std::string_view, float*> by_name;
  for (const ParamInfo& param : table.params()) {
    if (experts || param.role != ParamRole::ExpertWeight) by_name[param.name] = base + param.offset;
  }
  auto get = [&](const std::string& name) -> float* {
    const auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second;
  };

  ModelWeights w;
  w.embed = get("model.embed_tokens.weight");
  w.input_scale = get("model.input_hidden_states_scale");
  w.input_bias = get("model.input_hidden_states_bias");
  w.final_norm = get("model.norm.weight");
  w.lm_head = dims.tied_embeddings ? w.embed : get("lm_head.weight");
  w.lm_head_bias = get("lm_head.bias");
  for (int64_t i = 0; i < dims.layers; ++i) {
    const std::string p = layer_prefix(i);
    const std::string qkv = p + "self_attn.qkv_proj.", gate = p + "mlp.gate.";
    LayerWeights l;
    l.input_norm = get(p + "input_layernorm.weight");
    l.post_attention_norm = get(p + "post_attention_layernorm.weight");
    for (auto [site, target] : {std::pair{"post_attention_residual_scale.", &l.attention_residual},
                                std::pair{"post_mlp_residual_scale.", &l.mlp_residual}}) {
      target->h_scale = get(p + site + "hidden_states_scale");
      target->h_bias = get(p + site + "hidden_states_bias");
      target->r_scale = get(p + site + "residual_scale");
      target->r_bias = get(p + site + "residual_bias");
    }
    l.q_proj = get(qkv + "q_proj.weight");
    l.k_proj = get(qkv + "k_proj.weight");
    l.v_current = get(qkv + "v_proj_current.weight");
    l.v_delayed = get(qkv + "v_proj_delayed.weight");
    l.o_proj = get(p + "self_attn.o_proj.weight");
    l.q_bias = get(qkv + "q_proj.bias");
    l.k_bias = get(qkv + "k_proj.bias");
    l.v_current_bias = get(qkv + "v_proj_current.bias");
    l.v_delayed_bias = get(qkv + "v_proj_delayed.bias");
    l.o_bias = get(p + "self_attn.o_proj.bias");
    l.conv_dw_weight = get(qkv + "conv_qk_depthwise.weight");
    l.conv_dw_bias = get(qkv + "conv_qk_depthwise.bias");
    l.conv_g_weight = get(qkv + "conv_qk_grouped.weight");
    l.conv_g_bias = get(qkv + "conv_qk_grouped.bias");
    l.key_temp = get(p + "self_attn.qk_norm.temp");
    l.router_down = get(gate + "down_proj.weight");
    l.router_down_bias = get(gate + "down_proj.bias");
    l.router_states_scale = get(gate + "router_states_scale");
    l.router_norm = get(gate + "router_mlp.norm.weight");
    l.fc1 = get(gate + "router_mlp.fc1.weight");
    l.fc1_bias = get(gate + "router_mlp.fc1.bias");
    l.fc2 = get(gate + "router_mlp.fc2.weight");
    l.fc2_bias = get(gate + "router_mlp.fc2.bias");
    l.router_out = get(gate + "router_mlp.out_proj.weight");
    l.balancing_biases = get(gate + "balancing_biases");
    l.gate_up = get(p + kGateUp);
    l.down = get(p + kDown);
    if (!l.input_norm || !l.q_proj || (experts && !l.gate_up) || !l.router_out) {
      throw Error(cat("parameter table lacks layer ", i));
    }
    w.layers.push_back(l);
  }
  return w;
}

ModelMatrices bind_matrices(const ParameterTable& table, const ModelWeights& values, const float* values_base,
                            const BFloat16* copies, const BFloat16* expert_values) {
  auto read = [&](const float* value) -> Operand {
    return copies ? Operand(copies + (value - values_base)) : Operand(value);
  };
  auto expert = [&](int64_t layer, const char* name, const float* value) -> Operand {
    if (!expert_values) return read(value);
    return Operand(expert_values + (table.at(layer_prefix(layer) + name).offset - table.dense_floats()));
  };
  ModelMatrices m;
  m.lm_head = read(values.lm_head);
  for (size_t i = 0; i < values.layers.size(); ++i) {
    const LayerWeights& l = values.layers[i];
    m.layers.push_back({read(l.q_proj), read(l.k_proj), read(l.v_current), read(l.v_delayed), read(l.o_proj),
                        expert(int64_t(i), kGateUp, l.gate_up), expert(int64_t(i), kDown, l.down)});
  }
  return m;
}

bool is_product_matrix(const ParamInfo& param) {
  switch (param.role) {
    case ParamRole::Embedding:  // the head's matrix when tied
    case ParamRole::LmHead:
    case ParamRole::ExpertWeight:
      return true;
    case ParamRole::AttentionWeight:
      return true;
    default:
      return false;
  }
}

}  // namespace zaya
