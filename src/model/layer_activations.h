#pragma once
// What one decoder layer's forward pass keeps for its backward pass. Every buffer but host_offsets lives in
// the model's activation arena; T = tokens, H = hidden, C = conv channels, R = router size, N = tokens routed
// to an expert (not skipped).

#include <cstdint>
#include <vector>

#include "backend/ops.h"

namespace zaya {

struct LayerActivations {
  float* x_in = nullptr;   // [T, H] the residual stream entering the layer
  float* rstd1 = nullptr;  // [T] input_layernorm
  Destination xn1;         // [T, H] normalised input, padding rows zeroed: what q, k, v project (bf16 in
                           // bf16 runs, as every Destination here)

  float* qk0 = nullptr;      // [T, C] q_proj | k_proj outputs (the convolution's input)
  float* q_res = nullptr;    // [T, heads * D] the q-k mean skip for queries
  float* k_res = nullptr;    // [T, kv_heads * D] and for keys
  float* dw = nullptr;       // [B, S + k1 - 1, C] depthwise convolution output
  float* q_pre = nullptr;    // [T, heads * D] convolution + skip: the L2 norm's input
  float* k_pre = nullptr;    // [T, kv_heads * D]
  float* q_norms = nullptr;  // [T, heads]
  float* k_norms = nullptr;  // [T, kv_heads]
  float* q = nullptr;        // [T, heads, D] normalised, rotated
  float* k = nullptr;        // [T, kv_heads, D] normalised, times temp, rotated
  float* v = nullptr;        // [T, kv_heads * D] current half | delayed half
  float* o = nullptr;        // [T, heads * D] attention output
  Operand o_in;              // o as the products read it
  float* lse = nullptr;      // [B, heads, S]; context parallel [B, c, G S]
  float* attn = nullptr;     // [T, H] after o_proj
  // Context parallel (model/context_parallel.cpp): this rank's slice holds S positions of sequences of G S
  // (G ranks), and it attends over c of the heads and c_kv of the key-value heads.
  float* conv_in = nullptr;  // [B, h + S, C] each sequence's h halo rows then its qk0 rows: the convolution's
                             // input (dw then holds [B, h + S + k1 - 1, C])
  float* q_heads = nullptr;  // [B, G S, c, D] q, k and v of whole sequences, this rank's heads (q, k and v
  float* k_heads = nullptr;  // [B, G S, c_kv, D] themselves are not kept)
  float* v_heads = nullptr;  // [B, G S, c_kv, D]
  float* o_heads = nullptr;  // [B, G S, c, D]

  float* r1 = nullptr;     // [T, H] residual stream after attention
  float* rstd2 = nullptr;  // [T]
  float* xn2 = nullptr;    // [T, H] post_attention_layernorm output: router and expert input

  float* rh = nullptr;          // [T, R] router state after depth averaging (handed to the next layer)
  float* rn_rstd = nullptr;     // [T]
  float* rn = nullptr;          // [T, R] normalised router state
  float* f1_pre = nullptr;      // [T, R] fc1 output before GELU
  float* f1 = nullptr;          // [T, R]
  float* f2_pre = nullptr;      // [T, R]
  float* f2 = nullptr;          // [T, R]
  float* probs = nullptr;       // [T, E + 1] route probabilities
  int32_t* choice = nullptr;    // [T] chosen route (E = skip)
  float* gate = nullptr;        // [T] the chosen probability, 0 for skip
  float* router_lse = nullptr;  // [T] log-sum-exp of the router logits (z-loss)

  int32_t* order = nullptr;           // [T] token ids grouped by expert (first N used)
  int64_t* offsets = nullptr;         // [E + 1]
  std::vector<int64_t> host_offsets;  // [E + 1] read to the host under expert parallelism (its sizes)
  float* gate_up = nullptr;           // [N, 2I] expert gate | up outputs
  Destination act;                    // [N, I] silu(gate) * up
  float* y = nullptr;                 // [N, H] expert outputs before the gate
  float* moe = nullptr;               // [T, H] gated expert output per token
};

}  // namespace zaya
