// Cross-entropy over the vocabulary with its gradient fused in: a block per row (the logits are read once
// for the max and the sum of exponentials together, once more for the gradient, written in f32, bf16 or
// both), each row's loss into scratch, then one block adds the rows in a fixed order, so the total repeats
// bit for bit.

#include "backend/gpu/gpu_ops.h"
#include "backend/gpu/kernel_util.h"

namespace zaya {
namespace {

using gpu::block_dim_x;
using gpu::block_x;
using gpu::thread_x;

constexpr int32_t kIgnoreIndex = -100;
constexpr unsigned kLossThreads = 512;  // rows are long (vocabularies up to ~260k): many threads per row

// The log-sum-exp in one pass: each thread keeps the max of the values it has seen and the sum of their
// exponentials shifted by it (rescaled when the max grows), then the block rescales the threads' sums to
// the row's max and adds them. The log-sum-exp and the loss are in double, as the CPU's; the gradient is
// grad_scale * exp(z - lse), with grad_scale taken off at the label.
ZAYA_KERNEL(kLossThreads)
void cross_entropy_rows_kernel(const float* logits, const int32_t* labels, int64_t vocab, float grad_scale,
                               float* dlogits, uint16_t* dlogits_bf16, double* row_loss) {
  ZAYA_SHARED_ARRAY(scratch, float[gpu::kMaxWarps + 1]);
  const int64_t row = block_x();
  const int32_t label = labels[row];
  const float* z = logits + row * vocab;                                 // [vocab]
  float* dz = dlogits ? dlogits + row * vocab : nullptr;                 // [vocab], may be z itself
  uint16_t* dz16 = dlogits_bf16 ? dlogits_bf16 + row * vocab : nullptr;  // [vocab] bf16 bits
  if (label == kIgnoreIndex) {  // the same for the whole block: no barrier is skipped by some threads only
    if (thread_x() == 0) row_loss[row] = 0;
    for (int64_t j = thread_x(); j < vocab; j += block_dim_x()) {
      if (dz) dz[j] = 0.0f;
      if (dz16) dz16[j] = 0;
    }
    return;
  }
  // Read before any thread writes dz: the reductions below end in barriers that every thread passes after
  // this read.
  const float target = z[label];
  float max = -INFINITY, sum = 0;
  for (int64_t j = thread_x(); j < vocab; j += block_dim_x()) {
    const float value = z[j];
    if (value > max) {
      sum = sum * expf(max - value) + 1.0f;
      max = value;
    } else if (max != -INFINITY) {
      sum += expf(value - max);
    }
  }
  const float row_max = gpu::block_max(max, scratch);
  sum = gpu::block_sum(max == -INFINITY ? 0.0f : sum * expf(max - row_max), scratch);
  const double log_sum = log(double(sum)) + row_max;
  if (thread_x() == 0) row_loss[row] = log_sum - target;
  if (!dz && !dz16) return;
  const float shift = float(log_sum);
  // Each thread reads z[j] before writing dz[j], its own element: aliasing is safe.
  for (int64_t j = thread_x(); j < vocab; j += block_dim_x()) {
    float gradient = expf(z[j] - shift) * grad_scale;
    if (j == label) gradient -= grad_scale;
    if (dz) dz[j] = gradient;
    if (dz16) dz16[j] = gpu::bf16_bits(gradient);
  }
}

}  // namespace

void GpuOps::cross_entropy(const float* logits, const int32_t* labels, int64_t rows, int64_t vocab,
                           float grad_scale, float* dlogits, BFloat16* dlogits_bf16, double* loss_sum) {
  if (rows == 0) return;  // nothing to add, no gradient to write
  double* row_loss = reinterpret_cast<double*>(scratch(size_t(rows) * sizeof(double)));  // [rows]
  const gpu::Stream stream = gpu::as_stream(stream_);
  gpu::launch("cross_entropy_rows", cross_entropy_rows_kernel, {unsigned(rows)}, {kLossThreads}, 0, stream,
              logits, labels, vocab, grad_scale, dlogits, reinterpret_cast<uint16_t*>(dlogits_bf16),
              row_loss);
  gpu::launch("add_row_losses", gpu::add_values_kernel<kLossThreads>, {1}, {kLossThreads}, 0, stream,
              row_loss, rows, loss_sum);
}

}  // namespace zaya
