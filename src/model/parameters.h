#pragma once
// The model's parameters as flat buffers (values and gradients, the same layout) with a table of named
// views: transformers' names and shapes, in its state_dict order. The optimizer, the all-reduce,
// checkpointing and export walk this table; nothing walks the layers.
//
// Under expert parallelism a rank holds only its own experts: the table is built for an ExpertSlice, and
// the expert weights are [slice.count, ...] rows of transformers' [E, ...] tensors. The flat layout puts
// every other parameter first, [0, dense_floats()), and the expert weights after them, so that each kind
// is one range that the ranks holding the same values reduce and gather together.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/buffer.h"
#include "core/tensor.h"
#include "model/model_dims.h"

namespace zaya {

// What a parameter is, which decides its initialisation and (by default) its optimizer group.
enum class ParamRole : uint8_t {
  Embedding,          // model.embed_tokens.weight
  LmHead,             // lm_head.weight (untied models only)
  LmHeadBias,         // lm_head.bias
  InputScale,         // model.input_hidden_states_scale
  InputBias,          // model.input_hidden_states_bias
  Norm,               // RMSNorm gains
  ResidualScale,      // *_residual_scale.*_scale
  ResidualBias,       // *_residual_scale.*_bias
  AttentionWeight,    // q_proj, k_proj, v_proj_current, v_proj_delayed, o_proj
  AttentionBias,      // their biases (attention_bias)
  ConvWeight,         // conv_qk_depthwise / conv_qk_grouped weights
  ConvBias,           // and their biases
  KeyTemperature,     // qk_norm.temp
  RouterWeight,       // router down_proj, fc1, fc2, out_proj weights
  RouterBias,         // router down_proj, fc1, fc2 biases
  RouterStatesScale,  // router_states_scale (depth averaging)
  ExpertWeight,       // experts.gate_up_proj, experts.down_proj
  BalancingBias,  // mlp.gate.balancing_biases: a buffer, set by the balancing controller, not by gradients
};

std::string_view param_role_name(ParamRole role);

// The experts [first, first + count) of every layer; count 0 means all of them.
struct ExpertSlice {
  int64_t first = 0, count = 0;
};

struct ParamInfo {
  std::string name;
  Shape shape;               // what this table holds: expert weights have slice.count rows
  Shape model_shape;         // transformers' shape (expert weights: all E rows)
  int64_t model_offset = 0;  // elements of transformers' tensor before the rows held here
  int64_t offset = 0;        // in floats, into the flat buffers; 16-float (64-byte) aligned
  ParamRole role;
  int layer = -1;  // -1 outside the decoder layers
  bool trainable() const { return role != ParamRole::BalancingBias; }
  int64_t numel() const { return shape.numel(); }
};

class ParameterTable {
 public:
  explicit ParameterTable(const ModelDims& dims, ExpertSlice experts = {});

  const std::vector<ParamInfo>& params() const { return params_; }
  const ParamInfo* find(std::string_view name) const;
  const ParamInfo& at(std::string_view name) const;  // throws Error when absent
  int64_t total_floats() const { return total_floats_; }
  int64_t dense_floats() const { return dense_floats_; }   // where the expert weights start
  const ExpertSlice& experts() const { return experts_; }  // count resolved: never 0
  bool holds_all_experts() const { return experts_.first == 0 && experts_.count == experts_total_; }

 private:
  void add(std::string name, Shape shape, ParamRole role, int layer);

  std::vector<ParamInfo> params_;
  ExpertSlice experts_;
  int64_t experts_total_ = 0;
  int64_t total_floats_ = 0, dense_floats_ = 0;
};

// What a store holds of the expert weights: their f32 values (what training and everything else needs), or
// only their rounding to bf16, which is all that a model running forward in bf16 reads (zaya serve): 2 bytes
// an expert weight instead of 4 for the value and 2 for the model's bf16 copy. The experts are most of a
// ZAYA model's weights (87% of `medium`'s, 91% of ZAYA1-base's).
enum class ExpertValues : uint8_t { F32, Bf16 };

class ParameterStore {
 public:
  // Values and gradients live in `memory` (a backend's: Ops::memory()). The gradients are allocated (zero)
  // at their first use: a model that only runs forward (serve, eval, generate) never holds them.
  explicit ParameterStore(const ModelDims& dims, ExpertSlice experts = {},
                          MemoryResource& memory = host_memory());
  // The same over a table already built for `dims` (load_model checks the files against it first).
  ParameterStore(const ModelDims& dims, ParameterTable table, MemoryResource& memory = host_memory(),
                 ExpertValues expert_values = ExpertValues::F32);

  const ModelDims& dims() const { return dims_; }
  const ParameterTable& table() const { return table_; }
  ExpertValues expert_values() const { return expert_values_; }
  // The f32 values: [total_floats], or with bf16 experts the parameters before them, [dense_floats].
  float* values() { return values_.as<float>(); }
  const float* values() const { return values_.as<float>(); }
  // With bf16 experts, their values [total_floats - dense_floats], at each expert weight's offset less
  // dense_floats; null otherwise.
  const BFloat16* expert_values_bf16() const { return expert_bf16_.as<BFloat16>(); }
  // Gradients, the same layout as f32 values. A store of bf16 experts has none (throws Error): it only runs
  // forward.
  float* grads();
  bool holds_grads() const { return grads_.data() != nullptr; }
  // One parameter's f32 values; throws Error for an expert weight held in bf16.
  float* value(const ParamInfo& param);
  const float* value(const ParamInfo& param) const;
  float* grad(const ParamInfo& param) { return grads() + param.offset; }
  // Whether the store holds this parameter's values in bf16 only (an expert weight, with bf16 experts).
  bool holds_in_bf16(const ParamInfo& param) const {
    return expert_values_ == ExpertValues::Bf16 && param.role == ParamRole::ExpertWeight;
  }
  TensorView value_view(const ParamInfo& param) const;
  void zero_grads();
  // Where the values and gradients live.
  MemoryResource& memory() const { return memory_; }
  // One parameter's values through the host (files, initialisation, checkpoints), wherever they live. An
  // expert weight held in bf16 is written rounded to nearest even, and read as those bf16 values.
  std::vector<float> read_value(const ParamInfo& param) const;
  void read_value(const ParamInfo& param, float* host) const;  // into host[numel]
  void write_value(const ParamInfo& param, const float* host);
  // Every value from `host`, a store of the same table and expert values in the host's memory.
  void copy_values_from(const ParameterStore& host);

 private:
  // An expert weight's bf16 values (with bf16 experts).
  BFloat16* expert_bf16(const ParamInfo& param) {
    return expert_bf16_.as<BFloat16>() + (param.offset - table_.dense_floats());
  }
  const BFloat16* expert_bf16(const ParamInfo& param) const {
    return expert_values_bf16() + (param.offset - table_.dense_floats());
  }

  MemoryResource& memory_;
  ModelDims dims_;
  ParameterTable table_;
  ExpertValues expert_values_;
  AlignedBuffer values_, expert_bf16_, grads_;
};

// A copy of `host`'s values in `memory` (a backend's): how weights read from files reach a GPU.
std::unique_ptr<ParameterStore> place_parameters(const ParameterStore& host, MemoryResource& memory);

}  // namespace zaya
