// The CCA-specific ops: the q-k mean skip, the two causal convolutions over time, L2 normalisation with
// the key temperature, and partial rotary embeddings.

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/bf16_products.h"
#include "backend/cpu/cpu_ops.h"
#include "core/vec_math.h"

namespace zaya {
namespace {

// torch.finfo(torch.float32).eps: the floor ZayaQKNorm puts under each norm.
constexpr float kNormFloor = std::numeric_limits<float>::epsilon();

// Rearranges the grouped weight [channels, head_dim, k1] into one [head_dim_out, head_dim_in] matrix per
// (tap, channel block): taps[a][c][i] = weight[c][i][a], so each tap of each group is a plain GEMM operand.
void split_taps(const float* g_weight, int64_t channels, int64_t head_dim, int64_t k1, float* taps) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t i = 0; i < head_dim; ++i) {
      for (int64_t a = 0; a < k1; ++a)
        taps[(a * channels + c) * head_dim + i] = g_weight[(c * head_dim + i) * k1 + a];
    }
  }
}

// Rows of a [rows, channels] f32 tensor as one product operand per group of d channels. In f32 the tensor
// itself, each group's rows strided (ld channels); in bf16 a copy rounded once per call, group-major
// [groups, rows, d], so that each group's rows are dense (ld d). On dense operands the convolution's
// products ran at ~390 GFLOP/s in bf16 and ~210 in f32 here (~170 strided in f32, where a dense copy did
// not repay its cost). `storage` holds rows * channels / 2 floats (the bf16 copy).
class GroupRows {
 public:
  GroupRows(Precision precision, const float* x, int64_t rows, int64_t channels, int64_t d, float* storage)
      : x_(x), rows_(rows), channels_(channels), d_(d) {
    if (precision == Precision::F32) return;
    copy_ = reinterpret_cast<BFloat16*>(storage);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < channels / d; ++g)
        round_to_bf16(x + r * channels + g * d, d, copy_ + (g * rows + r) * d);
    }
  }

  // Group g's rows from `row` on, [n, d] with row stride ld().
  Operand at(int64_t g, int64_t row) const {
    if (!copy_) return x_ + row * channels_ + g * d_;
    return copy_ + (g * rows_ + row) * d_;
  }
  int64_t ld() const {
    return copy_ ? d_ : channels_;
  }

 private:
  const float* x_;
  int64_t rows_, channels_, d_;
  BFloat16* copy_ = nullptr;
};

// Floats that hold `count` bf16 values.
int64_t bf16_room(int64_t count) {
  return (count + 1) / 2;
}

// out[b * ld_out] = bias + weight . taps row b for B taps rows (row stride ld_taps) of `depth` floats: each
// weight chunk loaded serves B sums. Every sum is split over U = 8 / B consecutive chunks so that 8 sums
// are in flight (one sum per output waited on its adds: 0.3 ms a layer for 8 sequences of medium), and the
// weight is read in order (two rows read interleaved came from memory at half the speed).
template <int B>
void grouped_conv_dots(const float* weight, int64_t depth, const float* taps, int64_t ld_taps, float bias,
                       float* out, int64_t ld_out) {
  constexpr int U = 8 / B;
  Float8 sums[8] = {};  // [U, B]
  const int64_t unrolled_end = depth / (8 * U) * (8 * U), vector_end = depth / 8 * 8;
  for (int64_t p = 0; p < unrolled_end; p += 8 * U) {
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      const Float8 w = load8(weight + p + 8 * u);
#pragma GCC unroll 8
      for (int b = 0; b < B; ++b) sums[u * B + b] += w * load8(taps + b * ld_taps + p + 8 * u);
    }
  }
  for (int64_t p = unrolled_end; p < vector_end; p += 8) {
    const Float8 w = load8(weight + p);
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) sums[b] += w * load8(taps + b * ld_taps + p);
  }
#pragma GCC unroll 8
  for (int u = 1; u < U; ++u) {
#pragma GCC unroll 8
    for (int b = 0; b < B; ++b) sums[b] += sums[u * B + b];
  }
#pragma GCC unroll 8
  for (int b = B; b < 8; ++b) sums[b] = Float8{};
  const Float8 totals = lane_sums(sums);
  for (int b = 0; b < B; ++b) {
    float sum = totals[b];
    for (int64_t p = vector_end; p < depth; ++p) sum += weight[p] * taps[b * ld_taps + p];
    out[b * ld_out] = bias + sum;
  }
}

// The grouped convolution's last position for B sequences: out[b, c] = bias[c] + the taps of c's group in
// row b . weight row c.
template <int B>
void grouped_conv_last(const float* g_weight, const float* g_bias, const float* taps, int64_t ld_taps,
                       int64_t channels, int64_t d, int64_t depth, float* out, int64_t ld_out) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < channels; ++c)
    grouped_conv_dots<B>(g_weight + c * depth, depth, taps + c / d * depth, ld_taps, g_bias[c], out + c,
                         ld_out);
}

}  // namespace

void CpuOps::qk_mean_forward(const float* qk, int64_t tokens, int64_t ld, const AttentionShape& shape,
                             float* q_res, float* k_res) {
  const int64_t d = shape.head_dim, groups = shape.heads / shape.kv_heads;
  const float inv_groups = 1.0f / float(groups);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    const float* q = qk + t * ld;
    const float* k = q + shape.heads * d;
    float* qr = q_res + t * shape.heads * d;
    float* kr = k_res + t * shape.kv_heads * d;
    for (int64_t g = 0; g < shape.kv_heads; ++g) {
      float* kg = kr + g * d;
      std::fill(kg, kg + d, 0.0f);
      for (int64_t j = 0; j < groups; ++j) {
        const int64_t h = g * groups + j;
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) {
          qr[h * d + i] = (q[h * d + i] + k[g * d + i]) * 0.5f;
          kg[i] += qr[h * d + i];
        }
      }
#pragma omp simd
      for (int64_t i = 0; i < d; ++i) kg[i] *= inv_groups;
    }
  }
}

void CpuOps::qk_mean_backward(const float* dq_res, const float* dk_res, int64_t tokens, int64_t ld,
                              const AttentionShape& shape, float* dqk) {
  const int64_t d = shape.head_dim, groups = shape.heads / shape.kv_heads;
  const float inv_groups = 1.0f / float(groups);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < tokens; ++t) {
    float* dq = dqk + t * ld;
    float* dk = dq + shape.heads * d;
    const float* dqr = dq_res + t * shape.heads * d;
    const float* dkr = dk_res + t * shape.kv_heads * d;
    for (int64_t g = 0; g < shape.kv_heads; ++g) {
      for (int64_t j = 0; j < groups; ++j) {
        const int64_t h = g * groups + j;
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) {
          // The total gradient reaching q_res[h]: its own plus its share of the mean in k_res[g].
          const float through = 0.5f * (dqr[h * d + i] + dkr[g * d + i] * inv_groups);
          dq[h * d + i] += through;
          dk[g * d + i] += through;
        }
      }
    }
  }
}

int64_t CpuOps::cca_conv_scratch(const AttentionShape& shape, int64_t k0, int64_t k1) {
  const int64_t channels = (shape.heads + shape.kv_heads) * shape.head_dim;
  const int64_t taps = k1 * channels * shape.head_dim, dw_rows = shape.batch * (shape.seq + k1 - 1);
  // taps and their gradient; the depthwise output's gradient and the depthwise weight transposed; the bf16
  // copies of the taps, the depthwise output and the output gradient.
  return 2 * taps + dw_rows * channels + k0 * channels + bf16_room(taps) + bf16_room(dw_rows * channels) +
         bf16_room(shape.batch * shape.seq * channels);
}

void CpuOps::cca_conv_forward(Precision precision, const float* x, const AttentionShape& shape, int64_t k0,
                              int64_t k1, const float* dw_weight, const float* dw_bias, const float* g_weight,
                              const float* g_bias, float* dw, float* out, float* scratch) {
  const int64_t d = shape.head_dim, groups = shape.heads + shape.kv_heads, channels = groups * d;
  const int64_t batch = shape.batch, seq = shape.seq, pad = (k0 - 1) + (k1 - 1), dw_len = seq + k1 - 1;
  float* taps = scratch;                        // [k1, channels, d]
  float* taps_copy = taps + k1 * channels * d;  // the bf16 copies
  float* dw_copy = taps_copy + bf16_room(k1 * channels * d);

  // Depthwise: dw[b, j, c] = bias[c] + sum_a w[c, a] * x[b, j + a - pad, c] (zero left of the sequence).
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < dw_len; ++j) {
      float* row = dw + (b * dw_len + j) * channels;
      std::memcpy(row, dw_bias, size_t(channels) * sizeof(float));
      for (int64_t a = 0; a < k0; ++a) {
        const int64_t s = j + a - pad;
        if (s < 0 || s >= seq) continue;
        const float* xs = x + (b * seq + s) * channels;
#pragma omp simd
        for (int64_t c = 0; c < channels; ++c) row[c] += dw_weight[c * k0 + a] * xs[c];
      }
    }
  }

  // Grouped: out[b, t, group] = bias + sum_a dw[b, t + a, group] @ taps[a][group]^T.
  split_taps(g_weight, channels, d, k1, taps);
  const GroupRows tap_rows(precision, taps, k1 * channels, d, d, taps_copy);  // one group: as stored
  const GroupRows dw_rows(precision, dw, batch * dw_len, channels, d, dw_copy);
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t g = 0; g < groups; ++g) {
      float* o = out + b * seq * channels + g * d;
      for (int64_t t = 0; t < seq; ++t)
        std::memcpy(o + t * channels, g_bias + g * d, size_t(d) * sizeof(float));
      for (int64_t a = 0; a < k1; ++a) {
        gemm_on_this_thread(precision, Trans::No, Trans::Yes, seq, d, d, 1.0f, dw_rows.at(g, b * dw_len + a),
                            dw_rows.ld(), tap_rows.at(0, a * channels + g * d), d, 1.0f, o, channels);
      }
    }
  }
}

void CpuOps::cca_conv_decode(const float* window, const AttentionShape& shape, int64_t k0, int64_t k1,
                             const float* dw_weight, const float* dw_bias, const float* g_weight,
                             const float* g_bias, float* out) {
  const int64_t d = shape.head_dim, groups = shape.heads + shape.kv_heads, channels = groups * d;
  const int64_t batch = shape.batch, rows = (k0 - 1) + (k1 - 1) + 1, depth = d * k1;
  // taps [batch, channels, k1]: the k1 depthwise outputs the last position reads (tap a = bias + the
  // depthwise kernel over window rows a .. a + k0 - 1). A group's d channels of taps are laid out as each of
  // its output channels' grouped weight row [head_dim, k1], so every output is one contiguous dot product:
  // no rearranged copy of the weight, which cost a decode step more than the convolution itself. A tap is
  // summed for all channels at once (vector wide, the depthwise weight transposed to [k0, channels] for it)
  // and then spread into that layout.
  thread_local std::vector<float> buffer;  // the calling thread's: the loops below share it through taps
  buffer.resize(size_t(batch * channels * k1 + k0 * channels + batch * channels));
  float* taps = buffer.data();
  float* dw_t = taps + batch * channels * k1;  // [k0, channels]
  float* tap_rows = dw_t + k0 * channels;      // [batch, channels]: one tap at a time
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t j = 0; j < k0; ++j) dw_t[j * channels + c] = dw_weight[c * k0 + j];
  }
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    const float* x = window + b * rows * channels;
    float* row = tap_rows + b * channels;
    for (int64_t a = 0; a < k1; ++a) {
      std::memcpy(row, dw_bias, size_t(channels) * sizeof(float));
      for (int64_t j = 0; j < k0; ++j) {
        const float* weight = dw_t + j * channels;
        const float* input = x + (a + j) * channels;
#pragma omp simd
        for (int64_t c = 0; c < channels; ++c) row[c] += weight[c] * input[c];
      }
      for (int64_t c = 0; c < channels; ++c) taps[(b * channels + c) * k1 + a] = row[c];
    }
  }
  // Grouped, up to 8 sequences against each weight row read.
  using Last =
      void (*)(const float*, const float*, const float*, int64_t, int64_t, int64_t, int64_t, float*, int64_t);
  static constexpr Last kLast[] = {grouped_conv_last<1>, grouped_conv_last<2>, grouped_conv_last<3>,
                                   grouped_conv_last<4>, grouped_conv_last<5>, grouped_conv_last<6>,
                                   grouped_conv_last<7>, grouped_conv_last<8>};
  for (int64_t b0 = 0; b0 < batch; b0 += 8) {
    kLast[std::min<int64_t>(8, batch - b0) - 1](g_weight, g_bias, taps + b0 * channels * k1, channels * k1,
                                                channels, d, depth, out + b0 * channels, channels);
  }
}

void CpuOps::cca_conv_backward(Precision precision, const float* x, const float* dw, const float* dout,
                               const AttentionShape& shape, int64_t k0, int64_t k1, const float* dw_weight,
                               const float* g_weight, float* dx, float* d_dw_weight, float* d_dw_bias,
                               float* d_g_weight, float* d_g_bias, float* scratch) {
  const int64_t d = shape.head_dim, groups = shape.heads + shape.kv_heads, channels = groups * d;
  const int64_t batch = shape.batch, seq = shape.seq, pad = (k0 - 1) + (k1 - 1), dw_len = seq + k1 - 1;
  float* taps = scratch;
  float* d_taps = taps + k1 * channels * d;
  float* d_dw = d_taps + k1 * channels * d;
  float* dw_weight_t = d_dw + batch * dw_len * channels;  // [k0, channels]
  float* taps_copy = dw_weight_t + k0 * channels;         // the bf16 copies
  float* dw_copy = taps_copy + bf16_room(k1 * channels * d);
  float* dout_copy = dw_copy + bf16_room(batch * dw_len * channels);

  bias_backward(dout, batch * seq, channels, channels, d_g_bias);
  split_taps(g_weight, channels, d, k1, taps);
  const GroupRows tap_rows(precision, taps, k1 * channels, d, d, taps_copy);  // one group: as stored
  const GroupRows dw_rows(precision, dw, batch * dw_len, channels, d, dw_copy);
  const GroupRows dout_rows(precision, dout, batch * seq, channels, d, dout_copy);

  // Gradient of the depthwise output: d_dw[b, t + a, group] += dout[b, t, group] @ taps[a][group].
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t g = 0; g < groups; ++g) {
      float* target = d_dw + b * dw_len * channels + g * d;
      for (int64_t j = 0; j < dw_len; ++j) std::memset(target + j * channels, 0, size_t(d) * sizeof(float));
      for (int64_t a = 0; a < k1; ++a) {
        gemm_on_this_thread(precision, Trans::No, Trans::No, seq, d, d, 1.0f, dout_rows.at(g, b * seq),
                            dout_rows.ld(), tap_rows.at(0, a * channels + g * d), d, 1.0f,
                            target + a * channels, channels);
      }
    }
  }

  // Grouped weight gradient, one group per task, summed over sequences in order.
#pragma omp parallel for schedule(static)
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t a = 0; a < k1; ++a) {
      float* dtap = d_taps + (a * channels + g * d) * d;
      for (int64_t b = 0; b < batch; ++b) {
        gemm_on_this_thread(precision, Trans::Yes, Trans::No, d, d, seq, 1.0f, dout_rows.at(g, b * seq),
                            dout_rows.ld(), dw_rows.at(g, b * dw_len + a), dw_rows.ld(), b == 0 ? 0.0f : 1.0f,
                            dtap, d);
      }
    }
  }
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t a = 0; a < k1; ++a) d_g_weight[(c * d + i) * k1 + a] += d_taps[(a * channels + c) * d + i];
    }
  }

  // Depthwise: bias and weight gradients per channel, then dx[b, s] = sum_a w[a] * d_dw[b, s + pad - a].
  bias_backward(d_dw, batch * dw_len, channels, channels, d_dw_bias);
  // d w[c, a] = sum over (b, j) of d_dw[b, j, c] * x[b, j + a - pad, c]: per block of channels, in order.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (channels + kBlock - 1) / kBlock;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t a = 0; a < k0; ++a) {
    for (int64_t block = 0; block < blocks; ++block) {
      const int64_t c0 = block * kBlock, width = std::min(kBlock, channels - c0);
      float sum[kBlock] = {};
      for (int64_t b = 0; b < batch; ++b) {
        for (int64_t j = std::max<int64_t>(0, pad - a); j < std::min(dw_len, seq + pad - a); ++j) {
          const float* grad = d_dw + (b * dw_len + j) * channels + c0;
          const float* input = x + (b * seq + j + a - pad) * channels + c0;
#pragma omp simd
          for (int64_t c = 0; c < width; ++c) sum[c] += grad[c] * input[c];
        }
      }
      float* column = dw_weight_t + a * channels + c0;
      for (int64_t c = 0; c < width; ++c) column[c] = sum[c];
    }
  }
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t a = 0; a < k0; ++a) d_dw_weight[c * k0 + a] += dw_weight_t[a * channels + c];
  }
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      float* row = dx + (b * seq + s) * channels;
      std::memset(row, 0, size_t(channels) * sizeof(float));
      for (int64_t a = 0; a < k0; ++a) {
        const int64_t j = s + pad - a;
        if (j < 0 || j >= dw_len) continue;
        const float* grad = d_dw + (b * dw_len + j) * channels;
#pragma omp simd
        for (int64_t c = 0; c < channels; ++c) row[c] += dw_weight[c * k0 + a] * grad[c];
      }
    }
  }
}

void CpuOps::l2norm_forward(const float* x, int64_t rows, int64_t heads, int64_t head_dim, const float* temp,
                            float* out, float* norms) {
  const float target = std::sqrt(float(head_dim));
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows * heads; ++r) {
    const float* xr = x + r * head_dim;
    float sum_sq = 0;
#pragma omp simd reduction(+ : sum_sq)
    for (int64_t i = 0; i < head_dim; ++i) sum_sq += xr[i] * xr[i];
    const float norm = std::max(std::sqrt(sum_sq), kNormFloor);
    norms[r] = norm;
    const float factor = target / norm * (temp ? temp[r % heads] : 1.0f);
#pragma omp simd
    for (int64_t i = 0; i < head_dim; ++i) out[r * head_dim + i] = xr[i] * factor;
  }
}

// y = c x / n with n = max(|x|, floor), c = sqrt(D) * temp: dx = (c / n) (dy - x (x.dy) / |x|^2) while |x|
// is above the floor, (c / floor) dy below it; dtemp = sum (sqrt(D) / n) x.dy.
void CpuOps::l2norm_backward(const float* x, const float* norms, const float* dout, int64_t rows,
                             int64_t heads, int64_t head_dim, const float* temp, float* dx, float* dtemp) {
  const float target = std::sqrt(float(head_dim));
  auto dot = [&](int64_t r) {
    float sum = 0;
    for (int64_t i = 0; i < head_dim; ++i) sum += x[r * head_dim + i] * dout[r * head_dim + i];
    return sum;
  };
  if (temp)
    reduce_columns(rows, heads, dtemp, [&](int64_t row, int64_t h) {
      const int64_t r = row * heads + h;
      return target / norms[r] * dot(r);
    });
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows * heads; ++r) {
    const float* xr = x + r * head_dim;
    const float* dyr = dout + r * head_dim;
    const float norm = norms[r], factor = target / norm * (temp ? temp[r % heads] : 1.0f);
    float sum_sq = 0;
    for (int64_t i = 0; i < head_dim; ++i) sum_sq += xr[i] * xr[i];
    const float projection = std::sqrt(sum_sq) > kNormFloor ? dot(r) / sum_sq : 0.0f;
#pragma omp simd
    for (int64_t i = 0; i < head_dim; ++i) dx[r * head_dim + i] = factor * (dyr[i] - xr[i] * projection);
  }
}

void CpuOps::rope(float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t rotary_dim,
                  const float* cos, const float* sin, bool inverse) {
  const int64_t half = rotary_dim / 2;
  const float sign = inverse ? -1.0f : 1.0f;
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      const float* c = cos + s * half;
      const float* sn = sin + s * half;
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + ((b * seq + s) * heads + h) * head_dim;
#pragma omp simd
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = v[i], x2 = v[i + half], si = sign * sn[i];
          v[i] = x1 * c[i] - x2 * si;
          v[i + half] = x2 * c[i] + x1 * si;
        }
      }
    }
  }
}

}  // namespace zaya
