#include "model/model_stats.h"

#include <algorithm>

namespace zaya {

namespace {

// The mean number of keys a query sees at each of seq positions: (seq + 1) / 2 when causal, less with a
// window. Position i sees min(i + 1, window) keys; the sum in closed form (a loop would take as long as seq).
double mean_visible_keys(int64_t seq, int64_t window) {
  const double n = double(seq);
  if (window <= 0 || window >= seq) return (n + 1) / 2;
  const double w = double(window);
  return (w * (w + 1) / 2 + (n - w) * w) / n;
}

}  // namespace

ModelStats model_stats(const ParameterTable& table, const ModelDims& d, int64_t seq) {
  ModelStats s;
  int64_t matmul_active = 0;  // weights of the matrix products one token goes through
  for (const ParamInfo& p : table.params()) {
    if (!p.trainable()) continue;
    s.total += p.numel();
    switch (p.role) {
      case ParamRole::Embedding:
      case ParamRole::LmHead:
        s.embedding += p.numel();
        break;
      case ParamRole::ExpertWeight:
        matmul_active += p.numel() / d.experts;
        break;
      case ParamRole::AttentionWeight:
      case ParamRole::RouterWeight:
        matmul_active += p.numel();
        break;
      default:
        break;
    }
  }
  s.non_embedding = s.total - s.embedding;
  const int64_t per_expert = 3 * d.intermediate * d.hidden;  // gate_up [2I, H] and down [H, I]
  s.active_non_embedding = s.non_embedding - d.layers * (d.experts - 1) * per_expert;

  double forward = 2.0 * double(matmul_active + d.vocab * d.hidden);
  const double channels = double(d.conv_channels());
  for (const LayerDims& layer : d.layer) {
    forward += 2.0 * channels * double(d.conv_time0 + d.head_dim * d.conv_time1);
    forward += 2.0 * 2.0 * double(d.q_dim()) * mean_visible_keys(seq, layer.window);
  }
  s.forward_flops_per_token = forward;
  s.training_flops_per_token = 3.0 * forward;
  return s;
}

}  // namespace zaya
