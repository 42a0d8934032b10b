// Cross-entropy over the vocabulary, with its gradient fused in (the logits are read once for both).

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/vec_math.h"

namespace zaya {

namespace {
constexpr int32_t kIgnoreIndex = -100;
}

void CpuOps::cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t vocab,
                           float grad_scale, float* dlogits, double* loss_sum) {
  // Per-row losses summed afterwards in row order: the total does not depend on the thread count.
  thread_local std::vector<double> row_loss_storage;
  if (row_loss_storage.size() < size_t(rows)) row_loss_storage.resize(size_t(rows));
  double* row_loss = row_loss_storage.data();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = logits + r * vocab;
    float* dz = dlogits ? dlogits + r * vocab : nullptr;
    if (labels[r] == kIgnoreIndex) {
      row_loss[r] = 0;
      if (dz) std::fill(dz, dz + vocab, 0.0f);
      continue;
    }
    const float max = row_max(z, vocab);
    const double log_sum = std::log(double(exp_shifted(z, vocab, max, 0.0f, nullptr))) + max;
    row_loss[r] = log_sum - z[labels[r]];
    if (dz) {
      exp_shifted(z, vocab, float(log_sum), grad_scale, dz);  // the loss above has read z, which dz may alias
      dz[labels[r]] -= grad_scale;
    }
  }
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) total += row_loss[r];
  *loss_sum += total;
}

Ops& cpu_ops() {
  static CpuOps& ops = [&]() -> CpuOps& {
    require_address_space();
    static CpuOps made;
    return made;
  }();
  return ops;
}

}  // namespace zaya
