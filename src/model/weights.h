#pragma once
// Pointers to one set of parameter-shaped floats (the values, or the gradients) arranged the way the layer
// code reads them. Bound from the ParameterTable, so the table stays the single source of offsets. Optional
// parameters (biases the config turns off, layer 0's router_states_scale) are null.

#include <vector>

#include "backend/ops.h"
#include "model/parameters.h"

namespace zaya {

struct ResidualScaleWeights {
  float *h_scale = nullptr, *h_bias = nullptr, *r_scale = nullptr, *r_bias = nullptr;
};

struct LayerWeights {
  float* input_norm = nullptr;           // [H]
  float* post_attention_norm = nullptr;  // [H]
  ResidualScaleWeights attention_residual, mlp_residual;

  float *q_proj = nullptr, *k_proj = nullptr;        // [q_dim, H], [kv_dim, H]
  float *v_current = nullptr, *v_delayed = nullptr;  // [kv_dim / 2, H] each
  float* o_proj = nullptr;                           // [H, q_dim]
  float *q_bias = nullptr, *k_bias = nullptr, *v_current_bias = nullptr, *v_delayed_bias = nullptr,
        *o_bias = nullptr;                                   // attention_bias only
  float *conv_dw_weight = nullptr, *conv_dw_bias = nullptr;  // [C, 1, k0], [C]
  float *conv_g_weight = nullptr, *conv_g_bias = nullptr;    // [C, head_dim, k1], [C]
  float* key_temp = nullptr;                                 // [kv_heads]

  float *router_down = nullptr, *router_down_bias = nullptr;                       // [R, H], [R]
  float* router_states_scale = nullptr;                                            // [R]; null in layer 0
  float* router_norm = nullptr;                                                    // [R]
  float *fc1 = nullptr, *fc1_bias = nullptr, *fc2 = nullptr, *fc2_bias = nullptr;  // [R, R], [R]
  float* router_out = nullptr;                                                     // [E + 1, R]
  float* balancing_biases = nullptr;                                               // [E + 1]

  float* gate_up = nullptr;  // [E, 2I, H]
  float* down = nullptr;     // [E, H, I]
};

struct ModelWeights {
  float* embed = nullptr;  // [V, H]
  float *input_scale = nullptr, *input_bias = nullptr, *final_norm = nullptr;
  float* lm_head = nullptr;  // [V, H]: the embedding itself when tied
  float* lm_head_bias = nullptr;
  std::vector<LayerWeights> layers;
};

// base is ParameterStore::values() or ::grads(), over every parameter's floats; or (`experts` false) the
// values of a store that holds its expert weights in bf16, over the floats before them: gate_up and down are
// then null.
ModelWeights bind_weights(const ParameterTable& table, const ModelDims& dims, float* base,
                          bool experts = true);

// The weight matrices the bulk of the products multiply by, as those products read them: the f32 values,
// or their bf16 copies. The router's matrices are not among them: its products stay f32.
struct LayerMatrices {
  Operand q_proj, k_proj, v_current, v_delayed, o_proj;  // shapes as in LayerWeights
  Operand gate_up, down;                                 // [E, 2I, H], [E, H, I]
};

struct ModelMatrices {
  Operand lm_head;  // [V, H]
  std::vector<LayerMatrices> layers;
};

// The matrices of `values` (bound over the store's values) read from copies: a bf16 buffer with the
// store's layout (the same offsets), or the values themselves when copies is null. A store that holds its
// expert weights in bf16 only (ParameterStore::expert_values_bf16, given as `expert_values`) is read there.
ModelMatrices bind_matrices(const ParameterTable& table, const ModelWeights& values, const float* values_base,
                            const BFloat16* copies, const BFloat16* expert_values = nullptr);

// Whether a parameter is one of those matrices (the ones a bf16 run keeps copies of).
bool is_product_matrix(const ParamInfo& param);

}  // namespace zaya
