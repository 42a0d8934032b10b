// Causal GQA softmax attention with sliding windows and key padding, forward and backward, in blocks of
// queries so memory stays O(block x seq) and the masked upper triangle is never computed. The backward
// pass recomputes the probabilities from the saved log-sum-exp (as flash attention does).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/vec_math.h"

namespace zaya {
namespace {

constexpr int64_t kQueryBlock = 64;

// The keys query i may see: [first_key(i), i], minus padded ones.
struct KeyRange {
  int64_t window;
  int64_t first(int64_t i) const { return window > 0 ? std::max<int64_t>(0, i - window + 1) : 0; }
};

// A per-thread buffer that keeps its capacity, so steady-state steps allocate nothing.
float* thread_scratch(size_t floats, int slot) {
  thread_local std::vector<float> buffers[3];
  std::vector<float>& buffer = buffers[slot];
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Sets the scores query i may not see (future, outside the window, padded) to -inf. The row holds keys
// [k0, k0 + width).
void mask_row(float* row, int64_t i, int64_t k0, int64_t width, const KeyRange& range,
              const float* key_mask) {
  const int64_t first = range.first(i);
#pragma omp simd
  for (int64_t c = 0; c < width; ++c) {
    const int64_t j = k0 + c;
    const bool visible = j >= first && j <= i && (!key_mask || key_mask[j] != 0.0f);
    row[c] = visible ? row[c] : kNegInf;
  }
}

// Turns the scores of rows [i0, i1) into probabilities exp(score - lse), 0 where masked.
void probabilities_from_lse(float* scores, int64_t i0, int64_t i1, int64_t k0, const KeyRange& range,
                            const float* key_mask, const float* lse) {
  const int64_t width = i1 - k0;
  for (int64_t i = i0; i < i1; ++i) {
    float* row = scores + (i - i0) * width;
    if (lse[i] == kNegInf) {
      std::fill(row, row + width, 0.0f);
      continue;
    }
    mask_row(row, i, k0, width, range, key_mask);
    exp_shifted(row, width, lse[i], 1.0f, row);
  }
}

}  // namespace

void CpuOps::attention_forward(const float* q, const float* k, const float* v, const float* key_mask,
                               const AttentionShape& shape, float scale, float* o, float* lse) {
  const int64_t S = shape.seq, H = shape.heads, KV = shape.kv_heads, D = shape.head_dim;
  const int64_t groups = H / KV, blocks = (S + kQueryBlock - 1) / kQueryBlock;
  const KeyRange range{shape.window};

#pragma omp parallel for collapse(3) schedule(dynamic)
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t g = h / groups, i0 = blk * kQueryBlock, i1 = std::min(S, i0 + kQueryBlock);
        const int64_t k0 = range.first(i0), width = i1 - k0;
        const float* mask = key_mask ? key_mask + b * S : nullptr;
        float* scores = thread_scratch(size_t(kQueryBlock * S), 0);
        gemm(Trans::No, Trans::Yes, i1 - i0, width, D, scale, q + ((b * S + i0) * H + h) * D, H * D,
             k + ((b * S + k0) * KV + g) * D, KV * D, 0.0f, scores, width);
        float* row_lse = lse + (b * H + h) * S;
        for (int64_t i = i0; i < i1; ++i) {
          float* row = scores + (i - i0) * width;
          mask_row(row, i, k0, width, range, mask);
          const float max = row_max(row, width);
          if (max == kNegInf) {  // a row that sees no key at all: zero output
            std::fill(row, row + width, 0.0f);
            row_lse[i] = kNegInf;
            continue;
          }
          const float sum = exp_shifted(row, width, max, 1.0f, row);
          const float inv = 1.0f / sum;
#pragma omp simd
          for (int64_t c = 0; c < width; ++c) row[c] *= inv;
          row_lse[i] = max + std::log(sum);
        }
        gemm(Trans::No, Trans::No, i1 - i0, D, width, 1.0f, scores, width, v + ((b * S + k0) * KV + g) * D,
             KV * D, 0.0f, o + ((b * S + i0) * H + h) * D, H * D);
      }
    }
  }
}

// With P the probabilities and dO the output gradient: dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o
// O)), dQ = scale dS K, dK = scale dS^T Q. One task per (sequence, KV head) owns that head's dK and dV.
void CpuOps::attention_backward(const float* q, const float* k, const float* v, const float* key_mask,
                                const float* o, const float* lse, const float* dout,
                                const AttentionShape& shape, float scale, float* dq, float* dk, float* dv) {
  const int64_t S = shape.seq, H = shape.heads, KV = shape.kv_heads, D = shape.head_dim;
  const int64_t groups = H / KV, blocks = (S + kQueryBlock - 1) / kQueryBlock;
  const KeyRange range{shape.window};

#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t g = 0; g < KV; ++g) {
      const float* mask = key_mask ? key_mask + b * S : nullptr;
      float* dk_g = dk + (b * S * KV + g) * D;
      float* dv_g = dv + (b * S * KV + g) * D;
      for (int64_t s = 0; s < S; ++s) {
        std::memset(dk_g + s * KV * D, 0, size_t(D) * sizeof(float));
        std::memset(dv_g + s * KV * D, 0, size_t(D) * sizeof(float));
      }
      float* probs = thread_scratch(size_t(kQueryBlock * S), 0);
      float* dprobs = thread_scratch(size_t(kQueryBlock * S), 1);
      float* row_dot = thread_scratch(size_t(kQueryBlock), 2);
      for (int64_t h = g * groups; h < (g + 1) * groups; ++h) {
        const float* row_lse = lse + (b * H + h) * S;
        for (int64_t blk = 0; blk < blocks; ++blk) {
          const int64_t i0 = blk * kQueryBlock, i1 = std::min(S, i0 + kQueryBlock), rows = i1 - i0;
          const int64_t k0 = range.first(i0), width = i1 - k0;
          const float* q_blk = q + ((b * S + i0) * H + h) * D;
          const float* do_blk = dout + ((b * S + i0) * H + h) * D;
          const float* o_blk = o + ((b * S + i0) * H + h) * D;
          const float* k_blk = k + ((b * S + k0) * KV + g) * D;
          const float* v_blk = v + ((b * S + k0) * KV + g) * D;
          gemm(Trans::No, Trans::Yes, rows, width, D, scale, q_blk, H * D, k_blk, KV * D, 0.0f, probs, width);
          probabilities_from_lse(probs, i0, i1, k0, range, mask, row_lse);
          gemm(Trans::No, Trans::Yes, rows, width, D, 1.0f, do_blk, H * D, v_blk, KV * D, 0.0f, dprobs,
               width);
          for (int64_t r = 0; r < rows; ++r) {
            float dot = 0;
            for (int64_t i = 0; i < D; ++i) dot += do_blk[r * H * D + i] * o_blk[r * H * D + i];
            row_dot[r] = dot;
          }
          for (int64_t r = 0; r < rows; ++r) {
            float* ds = dprobs + r * width;
            const float* p = probs + r * width;
#pragma omp simd
            for (int64_t j = 0; j < width; ++j) ds[j] = p[j] * (ds[j] - row_dot[r]);
          }
          gemm(Trans::No, Trans::No, rows, D, width, scale, dprobs, width, k_blk, KV * D, 0.0f,
               dq + ((b * S + i0) * H + h) * D, H * D);
          gemm(Trans::Yes, Trans::No, width, D, rows, scale, dprobs, width, q_blk, H * D, 1.0f,
               dk_g + k0 * KV * D, KV * D);
          gemm(Trans::Yes, Trans::No, width, D, rows, 1.0f, probs, width, do_blk, H * D, 1.0f,
               dv_g + k0 * KV * D, KV * D);
        }
      }
    }
  }
}

void CpuOps::attention_decode(const float* q, const float* keys, const float* values, int64_t length,
                              const AttentionShape& shape, float scale, float* out) {
  const int64_t H = shape.heads, KV = shape.kv_heads, D = shape.head_dim, groups = H / KV;
  const int64_t first = shape.window > 0 ? std::max<int64_t>(0, length - shape.window) : 0,
                width = length - first;
#pragma omp parallel for schedule(static)
  for (int64_t h = 0; h < H; ++h) {
    const int64_t g = h / groups;
    float* scores = thread_scratch(size_t(width), 0);
    for (int64_t j = 0; j < width; ++j) {
      const float* k = keys + ((first + j) * KV + g) * D;
      float dot = 0;
      for (int64_t i = 0; i < D; ++i) dot += q[h * D + i] * k[i];
      scores[j] = scale * dot;
    }
    const float sum = exp_shifted(scores, width, row_max(scores, width), 1.0f, scores);
    float* o = out + h * D;
    std::fill(o, o + D, 0.0f);
    for (int64_t j = 0; j < width; ++j) {
      const float* v = values + ((first + j) * KV + g) * D;
      const float p = scores[j] / sum;
      for (int64_t i = 0; i < D; ++i) o[i] += p * v[i];
    }
  }
}

}  // namespace zaya
