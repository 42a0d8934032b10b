// The token embedding, (table[id] + bias) * scale, and its gradient. Parallel over tokens forward and over
// columns backward, each table row's sum in token order (fixed order, whatever the thread count).

#include <algorithm>

#include "backend/cpu/cpu_ops.h"

namespace zaya {

void CpuOps::embedding_forward(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                               const float* bias, const float* scale, float* out) {
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = table + int64_t(ids[t]) * hidden;
    float* y = out + t * hidden;
#pragma omp simd
    for (int64_t j = 0; j < hidden; ++j) y[j] = (row[j] + bias[j]) * scale[j];
  }
}

void CpuOps::embedding_backward(const int32_t* ids, int64_t tokens, const float* table, int64_t hidden,
                                const float* bias, const float* scale, const float* dout, int32_t skip_id,
                                float* dtable, float* dbias, float* dscale) {
  reduce_columns(tokens, hidden, dbias,
                 [&](int64_t t, int64_t j) { return dout[t * hidden + j] * scale[j]; });
  reduce_columns(tokens, hidden, dscale, [&](int64_t t, int64_t j) {
    return dout[t * hidden + j] * (table[int64_t(ids[t]) * hidden + j] + bias[j]);
  });
  // Rows of the table are summed token by token in order; columns split across threads keep that order.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (hidden + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < blocks; ++block) {
    const int64_t begin = block * kBlock, end = std::min(begin + kBlock, hidden);
    for (int64_t t = 0; t < tokens; ++t) {
      if (ids[t] == skip_id) continue;
      float* row = dtable + int64_t(ids[t]) * hidden;
      for (int64_t j = begin; j < end; ++j) row[j] += dout[t * hidden + j] * scale[j];
    }
  }
}

}  // namespace zaya
