#include "model/parameters.h"

#include <cstring>
#include <utility>

#include "core/error.h"

namespace zaya {

std::string_view param_role_name(ParamRole role) {
  switch (role) {
    case ParamRole::Embedding:
      return "embedding";
    case ParamRole::LmHead:
      return "lm_head";
    case ParamRole::LmHeadBias:
      return "lm_head_bias";
    case ParamRole::InputScale:
      return "input_scale";
    case ParamRole::InputBias:
      return "input_bias";
    case ParamRole::Norm:
      return "norm";
    case ParamRole::ResidualScale:
      return "residual_scale";
    case ParamRole::ResidualBias:
      return "residual_bias";
    case ParamRole::AttentionWeight:
      return "attention_weight";
    case ParamRole::AttentionBias:
      return "attention_bias";
    case ParamRole::ConvWeight:
      return "conv_weight";
    case ParamRole::ConvBias:
      return "conv_bias";
    case ParamRole::KeyTemperature:
      return "key_temperature";
    case ParamRole::RouterWeight:
      return "router_weight";
    case ParamRole::RouterBias:
      return "router_bias";
    case ParamRole::RouterStatesScale:
      return "router_states_scale";
    case ParamRole::ExpertWeight:
      return "expert_weight";
    case ParamRole::BalancingBias:
      return "balancing_bias";
  }
  return "?";
}

ParameterTable::ParameterTable(const ModelDims& d, ExpertSlice experts)
    : experts_(experts), experts_total_(d.experts) {
  if (experts_.count == 0) experts_.count = d.experts;
  if (experts_.first < 0 || experts_.count < 0 || experts_.first + experts_.count > d.experts)
    throw Error(cat("experts [", experts_.first, ", ", experts_.first + experts_.count,
                    ") are not a part of the model's ", d.experts));
  using R = ParamRole;
  const int64_t H = d.hidden, C = d.conv_channels();
  add("model.embed_tokens.weight", {d.vocab, H}, R::Embedding, -1);
  for (int i = 0; i < int(d.layers); ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    const std::string attn = p + "self_attn.", qkv = attn + "qkv_proj.";
    add(attn + "o_proj.weight", {H, d.q_dim()}, R::AttentionWeight, i);
    if (d.attention_bias) add(attn + "o_proj.bias", {H}, R::AttentionBias, i);
    const std::pair<const char*, int64_t> projections[] = {{"q_proj", d.q_dim()},
                                                           {"k_proj", d.kv_dim()},
                                                           {"v_proj_current", d.kv_dim() / 2},
                                                           {"v_proj_delayed", d.kv_dim() / 2}};
    for (const auto& [name, rows] : projections) {
      add(qkv + name + ".weight", {rows, H}, R::AttentionWeight, i);
      if (d.attention_bias) add(qkv + name + ".bias", {rows}, R::AttentionBias, i);
    }
    add(qkv + "conv_qk_depthwise.weight", {C, 1, d.conv_time0}, R::ConvWeight, i);
    add(qkv + "conv_qk_depthwise.bias", {C}, R::ConvBias, i);
    add(qkv + "conv_qk_grouped.weight", {C, d.head_dim, d.conv_time1}, R::ConvWeight, i);
    add(qkv + "conv_qk_grouped.bias", {C}, R::ConvBias, i);
    add(attn + "qk_norm.temp", {d.kv_heads}, R::KeyTemperature, i);

    const std::string gate = p + "mlp.gate.";
    if (i > 0) add(gate + "router_states_scale", {d.router}, R::RouterStatesScale, i);
    add(gate + "balancing_biases", {d.routes()}, R::BalancingBias, i);
    add(gate + "down_proj.weight", {d.router, H}, R::RouterWeight, i);
    add(gate + "down_proj.bias", {d.router}, R::RouterBias, i);
    add(gate + "router_mlp.norm.weight", {d.router}, R::Norm, i);
    add(gate + "router_mlp.fc1.weight", {d.router, d.router}, R::RouterWeight, i);
    add(gate + "router_mlp.fc1.bias", {d.router}, R::RouterBias, i);
    add(gate + "router_mlp.fc2.weight", {d.router, d.router}, R::RouterWeight, i);
    add(gate + "router_mlp.fc2.bias", {d.router}, R::RouterBias, i);
    add(gate + "router_mlp.out_proj.weight", {d.routes(), d.router}, R::RouterWeight, i);
    add(p + "mlp.experts.gate_up_proj", {d.experts, 2 * d.intermediate, H}, R::ExpertWeight, i);
    add(p + "mlp.experts.down_proj", {d.experts, H, d.intermediate}, R::ExpertWeight, i);

    add(p + "input_layernorm.weight", {H}, R::Norm, i);
    add(p + "post_attention_layernorm.weight", {H}, R::Norm, i);
    for (const char* site : {"post_attention_residual_scale.", "post_mlp_residual_scale."}) {
      add(p + site + "hidden_states_scale", {H}, R::ResidualScale, i);
      add(p + site + "hidden_states_bias", {H}, R::ResidualBias, i);
      add(p + site + "residual_scale", {H}, R::ResidualScale, i);
      add(p + site + "residual_bias", {H}, R::ResidualBias, i);
    }
  }
  add("model.norm.weight", {H}, R::Norm, -1);
  add("model.input_hidden_states_scale", {H}, R::InputScale, -1);
  add("model.input_hidden_states_bias", {H}, R::InputBias, -1);
  if (!d.tied_embeddings) add("lm_head.weight", {d.vocab, H}, R::LmHead, -1);
  if (d.lm_head_bias) add("lm_head.bias", {d.vocab}, R::LmHeadBias, -1);

  // Offsets: the dense parameters in table order, then the expert weights in table order.
  const auto aligned = [](const Shape& shape) {
    return int64_t(align_up(size_t(shape.numel()), kAlignment / sizeof(float)));
  };
  for (bool expert : {false, true}) {
    if (expert) dense_floats_ = total_floats_;
    for (ParamInfo& param : params_) {
      if ((param.role == R::ExpertWeight) != expert) continue;
      param.offset = total_floats_;
      total_floats_ += aligned(param.shape);
    }
  }
}

void ParameterTable::add(std::string name, Shape shape, ParamRole role, int layer) {
  Shape held = shape;
  int64_t skipped = 0;
  if (role == ParamRole::ExpertWeight) {
    held[0] = experts_.count;
    skipped = experts_.first * (shape.numel() / shape[0]);
  }
  params_.push_back({std::move(name), held, shape, skipped, 0, role, layer});
}

const ParamInfo* ParameterTable::find(std::string_view name) const {
  for (const ParamInfo& param : params_) {
    if (param.name == name) return &param;
  }
  return nullptr;
}

const ParamInfo& ParameterTable::at(std::string_view name) const {
  const ParamInfo* param = find(name);
  if (!param) throw Error("the model has no parameter of this name").tensor(std::string(name));
  return *param;
}

ParameterStore::ParameterStore(const ModelDims& dims, ExpertSlice experts, MemoryResource& memory)
    : ParameterStore(dims, ParameterTable(dims, experts), memory) {}

ParameterStore::ParameterStore(const ModelDims& dims, ParameterTable table, MemoryResource& memory,
                               ExpertValues expert_values)
    : memory_(memory), dims_(dims), table_(std::move(table)), expert_values_(expert_values) {
  const int64_t dense = table_.dense_floats(), experts = table_.total_floats() - dense;
  if (expert_values_ == ExpertValues::F32) {
    values_ = AlignedBuffer(size_t(dense + experts) * sizeof(float), memory);
  } else {
    values_ = AlignedBuffer(size_t(dense) * sizeof(float), memory);
    expert_bf16_ = AlignedBuffer(size_t(experts) * sizeof(BFloat16), memory);
  }
}

float* ParameterStore::grads() {
  if (expert_values_ == ExpertValues::Bf16)
    throw Error("this store holds its expert weights in bf16 only, for running forward: it has no gradients");
  if (!holds_grads()) grads_ = AlignedBuffer(size_t(table_.total_floats()) * sizeof(float), memory_);
  return grads_.as<float>();
}

float* ParameterStore::value(const ParamInfo& param) {
  return const_cast<float*>(std::as_const(*this).value(param));
}

const float* ParameterStore::value(const ParamInfo& param) const {
  if (holds_in_bf16(param))
    throw Error("this store holds the expert weights in bf16 only, for running forward").tensor(param.name);
  return values() + param.offset;
}

TensorView ParameterStore::value_view(const ParamInfo& param) const {
  return {const_cast<float*>(value(param)), DType::F32, param.shape};
}

std::vector<float> ParameterStore::read_value(const ParamInfo& param) const {
  std::vector<float> host(size_t(param.numel()));
  read_value(param, host.data());
  return host;
}

void ParameterStore::read_value(const ParamInfo& param, float* host) const {
  if (!holds_in_bf16(param)) {
    memory_.copy_to_host(host, value(param), size_t(param.numel()) * sizeof(float));
    return;
  }
  std::vector<BFloat16> rounded(size_t(param.numel()));
  memory_.copy_to_host(rounded.data(), expert_bf16(param), rounded.size() * sizeof(BFloat16));
  for (size_t i = 0; i < rounded.size(); ++i) host[i] = bf16_to_f32(rounded[i].bits);
}

void ParameterStore::write_value(const ParamInfo& param, const float* host) {
  if (!holds_in_bf16(param)) {
    memory_.copy_from_host(value(param), host, size_t(param.numel()) * sizeof(float));
    return;
  }
  std::vector<BFloat16> rounded(size_t(param.numel()));
  for (size_t i = 0; i < rounded.size(); ++i) rounded[i].bits = f32_to_bf16(host[i]);
  memory_.copy_from_host(expert_bf16(param), rounded.data(), rounded.size() * sizeof(BFloat16));
}

void ParameterStore::copy_values_from(const ParameterStore& host) {
  if (host.table().total_floats() != table_.total_floats() || host.expert_values() != expert_values_ ||
      &host.memory() != &host_memory()) {
    throw Error(
        "parameters copied from a store of another shape or kind of expert values, or not in the "
        "host's memory");
  }
  memory_.copy_from_host(values(), host.values(), values_.size());
  if (expert_bf16_.size() > 0)
    memory_.copy_from_host(expert_bf16_.data(), host.expert_bf16_.data(), expert_bf16_.size());
}

void ParameterStore::zero_grads() {
  memory_.zero(grads(), size_t(table_.total_floats()) * sizeof(float));
}

std::unique_ptr<ParameterStore> place_parameters(const ParameterStore& host, MemoryResource& memory) {
  auto placed = std::make_unique<ParameterStore>(host.dims(), host.table(), memory, host.expert_values());
  placed->copy_values_from(host);
  return placed;
}

}  // namespace zaya
