#pragma once
// Parameter counts and FLOPs per token, computed from the parameter table and the shapes.

#include <cstdint>

#include "model/parameters.h"

namespace zaya {

struct ModelStats {
  int64_t total = 0;                 // trainable parameters (the balancing-bias buffers are not counted)
  int64_t embedding = 0;             // embed_tokens, plus lm_head when untied
  int64_t non_embedding = 0;         // total - embedding
  int64_t active_non_embedding = 0;  // what one token passes through: every expert but the one it is routed
                                     // to is left out (top-1; the skip route is counted as a routed token)
  double forward_flops_per_token =
      0;  // matrix products (2 per multiply-add) incl. the LM head, convolutions,
          // attention scores and values at the given sequence length
  double training_flops_per_token = 0;  // 3x forward: backward costs twice the forward
};

ModelStats model_stats(const ParameterTable& table, const ModelDims& dims, int64_t seq);

}  // namespace zaya
