// Causal GQA softmax attention with sliding windows and key padding, forward and backward, in blocks of
// queries so memory stays O(block x seq) and the masked upper triangle is never computed. The backward
// pass recomputes the probabilities from the saved log-sum-exp (as flash attention does). In bf16 the
// products read bf16 operands (q, k, v and the output gradient rounded once per call, probabilities and
// score gradients once per block) and sum in f32; masking, softmax and log-sum-exp stay f32.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include <omp.h>

#include "backend/cpu/bf16_matmul.h"
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
  thread_local std::vector<float> buffers[6];
  std::vector<float>& buffer = buffers[slot];
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

// dst[r * ld_dst + c] = src[r * ld_src + c] for r < rows, c < n. The products write dense blocks (a strided
// output, too, keeps oneDNN off AMX), copied to the [tokens, heads, D] tensors here.
void copy_block(const float* src, int64_t ld_src, int64_t rows, int64_t n, float* dst, int64_t ld_dst) {
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * ld_dst, src + r * ld_src, size_t(n) * sizeof(float));
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

// A product operand: its first element, its row stride, and whether it is stored transposed.
struct MatrixView {
  Operand data;
  int64_t ld;
  Trans trans;
};

// q, k, v or the output gradient ([batch, seq, heads, D] f32) as product operands: the positions [s, s + n)
// of one head as [n, D] (rows) or [D, n] (columns). In f32 they read the tensor in place. In bf16 they read
// a copy rounded once per call, head-major [batch, heads, seq, D], so that each block is dense: oneDNN runs
// its AMX kernels on dense operands only (strided ones fall to a path 3-10x slower at these sizes).
class HeadOperand {
 public:
  HeadOperand(Precision precision, const float* x, const AttentionShape& shape, int64_t heads,
              AlignedBuffer& buffer, MemoryResource& memory)
      : x_(x), seq_(shape.seq), heads_(heads), dim_(shape.head_dim) {
    if (precision == Precision::F32) return;
    const size_t bytes = size_t(shape.batch * seq_ * heads_ * dim_) * sizeof(BFloat16);
    if (buffer.size() < bytes) buffer = AlignedBuffer(bytes, memory);
    copy_ = buffer.as<BFloat16>();
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < shape.batch; ++b) {
      for (int64_t s = 0; s < seq_; ++s) {
        for (int64_t h = 0; h < heads_; ++h) round_to_bf16(in_place(b, s, h), dim_, at(b, s, h));
      }
    }
  }

  MatrixView rows(int64_t b, int64_t s, int64_t h) const {
    return view(b, s, h, Trans::No);
  }
  MatrixView columns(int64_t b, int64_t s, int64_t h) const {
    return view(b, s, h, Trans::Yes);
  }

 private:
  const float* in_place(int64_t b, int64_t s, int64_t h) const {
    return x_ + ((b * seq_ + s) * heads_ + h) * dim_;
  }
  BFloat16* at(int64_t b, int64_t s, int64_t h) const {
    return copy_ + ((b * heads_ + h) * seq_ + s) * dim_;
  }
  MatrixView view(int64_t b, int64_t s, int64_t h, Trans trans) const {
    if (!copy_) return {in_place(b, s, h), heads_ * dim_, trans};
    return {at(b, s, h), dim_, trans};
  }

  const float* x_;
  int64_t seq_, heads_, dim_;
  BFloat16* copy_ = nullptr;
};

// A block of probabilities or score gradients [rows, width] as a left operand: the f32 values in place, or
// (bf16) their rounding into a per-thread buffer.
MatrixView block_operand(Precision precision, const float* x, int64_t rows, int64_t width, int slot) {
  if (precision == Precision::F32) return {x, width, Trans::No};
  thread_local std::vector<BFloat16> buffers[2];
  std::vector<BFloat16>& buffer = buffers[slot];
  if (buffer.size() < size_t(rows * width)) buffer.resize(size_t(rows * width));
  round_to_bf16(x, rows * width, buffer.data());
  return {buffer.data(), width, Trans::No};
}

// The transpose [width, rows] of a block_operand [rows, width]: the same f32 values read transposed, or
// (bf16) a transposed copy in a per-thread buffer (a transposed left operand, too, keeps oneDNN off AMX).
MatrixView transposed(const MatrixView& block, int64_t rows, int64_t width, int slot) {
  if (block.data.type == DType::F32) return {block.data, block.ld, Trans::Yes};
  thread_local std::vector<BFloat16> buffers[2];
  std::vector<BFloat16>& buffer = buffers[slot];
  if (buffer.size() < size_t(rows * width)) buffer.resize(size_t(rows * width));
  const auto* src = static_cast<const BFloat16*>(block.data.data);
  constexpr int64_t kTile = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (int64_t c0 = 0; c0 < width; c0 += kTile) {
      for (int64_t c = c0; c < std::min(width, c0 + kTile); ++c) {
        for (int64_t r = r0; r < std::min(rows, r0 + kTile); ++r)
          buffer[size_t(c * rows + r)] = src[r * width + c];
      }
    }
  }
  return {buffer.data(), rows, Trans::No};
}

}  // namespace

void CpuOps::attention_forward(Precision precision, const float* q, const float* k, const float* v,
                               const float* key_mask, const AttentionShape& shape, float scale, float* o,
                               float* lse) {
  const int64_t S = shape.seq, H = shape.heads, KV = shape.kv_heads, D = shape.head_dim;
  const int64_t groups = H / KV, blocks = (S + kQueryBlock - 1) / kQueryBlock;
  const KeyRange range{shape.window};
  const HeadOperand q_in(precision, q, shape, H, attention_operands_[0], memory());
  const HeadOperand k_in(precision, k, shape, KV, attention_operands_[1], memory());
  const HeadOperand v_in(precision, v, shape, KV, attention_operands_[2], memory());
  auto product = [&](int64_t m, int64_t n, int64_t depth, float alpha, const MatrixView& a,
                     const MatrixView& b, float* c, int64_t ldc) {
    gemm(precision, a.trans, b.trans, m, n, depth, alpha, a.data, a.ld, b.data, b.ld, 0.0f, c, ldc);
  };

#pragma omp parallel for collapse(3) schedule(dynamic)
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t g = h / groups, i0 = blk * kQueryBlock, i1 = std::min(S, i0 + kQueryBlock);
        const int64_t rows = i1 - i0, k0 = range.first(i0), width = i1 - k0;
        const float* mask = key_mask ? key_mask + b * S : nullptr;
        float* scores = thread_scratch(size_t(kQueryBlock * S), 0);
        product(rows, width, D, scale, q_in.rows(b, i0, h), k_in.columns(b, k0, g), scores, width);
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
        float* o_blk = thread_scratch(size_t(kQueryBlock * D), 1);
        product(rows, D, width, 1.0f, block_operand(precision, scores, rows, width, 0), v_in.rows(b, k0, g),
                o_blk, D);
        copy_block(o_blk, D, rows, D, o + ((b * S + i0) * H + h) * D, H * D);
      }
    }
  }
}

// With P the probabilities and dO the output gradient: dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dO o
// O)), dQ = scale dS K, dK = scale dS^T Q. One task per (sequence, KV head) owns that head's dK and dV.
void CpuOps::attention_backward(Precision precision, const float* q, const float* k, const float* v,
                                const float* key_mask, const float* o, const float* lse, const float* dout,
                                const AttentionShape& shape, float scale, float* dq, float* dk, float* dv) {
  const int64_t S = shape.seq, H = shape.heads, KV = shape.kv_heads, D = shape.head_dim;
  const int64_t groups = H / KV, blocks = (S + kQueryBlock - 1) / kQueryBlock;
  const KeyRange range{shape.window};
  const HeadOperand q_in(precision, q, shape, H, attention_operands_[0], memory());
  const HeadOperand k_in(precision, k, shape, KV, attention_operands_[1], memory());
  const HeadOperand v_in(precision, v, shape, KV, attention_operands_[2], memory());
  const HeadOperand dout_in(precision, dout, shape, H, attention_operands_[3], memory());
  auto product = [&](int64_t m, int64_t n, int64_t depth, float alpha, const MatrixView& a,
                     const MatrixView& b, float beta, float* c, int64_t ldc) {
    gemm(precision, a.trans, b.trans, m, n, depth, alpha, a.data, a.ld, b.data, b.ld, beta, c, ldc);
  };

#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t g = 0; g < KV; ++g) {
      const float* mask = key_mask ? key_mask + b * S : nullptr;
      float* probs = thread_scratch(size_t(kQueryBlock * S), 0);
      float* dprobs = thread_scratch(size_t(kQueryBlock * S), 1);
      float* row_dot = thread_scratch(size_t(kQueryBlock), 2);
      float* dq_blk = thread_scratch(size_t(kQueryBlock * D), 3);
      // This head's dK and dV [S, D], dense; copied out at the end.
      float* dk_g = thread_scratch(size_t(S * D), 4);
      float* dv_g = thread_scratch(size_t(S * D), 5);
      std::fill(dk_g, dk_g + S * D, 0.0f);
      std::fill(dv_g, dv_g + S * D, 0.0f);
      for (int64_t h = g * groups; h < (g + 1) * groups; ++h) {
        const float* row_lse = lse + (b * H + h) * S;
        for (int64_t blk = 0; blk < blocks; ++blk) {
          const int64_t i0 = blk * kQueryBlock, i1 = std::min(S, i0 + kQueryBlock), rows = i1 - i0;
          const int64_t k0 = range.first(i0), width = i1 - k0;
          const int64_t q_at = ((b * S + i0) * H + h) * D;
          const float* do_blk = dout + q_at;
          const float* o_blk = o + q_at;
          product(rows, width, D, scale, q_in.rows(b, i0, h), k_in.columns(b, k0, g), 0.0f, probs, width);
          probabilities_from_lse(probs, i0, i1, k0, range, mask, row_lse);
          product(rows, width, D, 1.0f, dout_in.rows(b, i0, h), v_in.columns(b, k0, g), 0.0f, dprobs, width);
          for (int64_t r = 0; r < rows; ++r) {
            float dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int64_t i = 0; i < D; ++i) dot += do_blk[r * H * D + i] * o_blk[r * H * D + i];
            row_dot[r] = dot;
          }
          for (int64_t r = 0; r < rows; ++r) {
            float* ds = dprobs + r * width;
            const float* p = probs + r * width;
#pragma omp simd
            for (int64_t j = 0; j < width; ++j) ds[j] = p[j] * (ds[j] - row_dot[r]);
          }
          const MatrixView ds_in = block_operand(precision, dprobs, rows, width, 0);
          product(rows, D, width, scale, ds_in, k_in.rows(b, k0, g), 0.0f, dq_blk, D);
          copy_block(dq_blk, D, rows, D, dq + q_at, H * D);
          product(width, D, rows, scale, transposed(ds_in, rows, width, 0), q_in.rows(b, i0, h), 1.0f,
                  dk_g + k0 * D, D);
          product(width, D, rows, 1.0f,
                  transposed(block_operand(precision, probs, rows, width, 1), rows, width, 1),
                  dout_in.rows(b, i0, h), 1.0f, dv_g + k0 * D, D);
        }
      }
      copy_block(dk_g, D, S, D, dk + (b * S * KV + g) * D, KV * D);
      copy_block(dv_g, D, S, D, dv + (b * S * KV + g) * D, KV * D);
    }
  }
}

namespace {

// Decoding reads a cache in order, both passes (the scores, then after the softmax the value sums) in blocks
// of kDecodeKeys positions whose whole rows (every key-value head) are used before the next block, which is
// prefetched meanwhile: the hardware prefetcher alone left the cores waiting on memory. A group's heads are
// taken NQ at a time, so that each key or value vector loaded serves NQ queries.
constexpr int64_t kDecodeKeys = 4;
// A sequence's keys are split among threads when there are fewer sequences than threads, into ranges of at
// least this many keys (each range's results are then merged by their log-sum-exp).
constexpr int64_t kDecodeSplitKeys = 64;

// scores[q * ld_scores + j] = scale * query[q] . keys[j * ld] for NQ queries (D floats apart) and j < count
// (at most kDecodeKeys). NK keys at a time, so that NQ * NK sums (8, or 4 for one query) are in flight (a
// lone sum waits on each add), reduced together by lane_sums.
template <int NQ>
void decode_scores(const float* query, const float* keys, int64_t ld, int64_t count, int64_t D, float scale,
                   float* scores, int64_t ld_scores) {
  constexpr int NK = std::min<int>(8 / NQ, kDecodeKeys);
  const int64_t vector_end = D / 8 * 8;
  int64_t j = 0;
  for (; j + NK <= count; j += NK) {
    const float* k = keys + j * ld;
    Float8 sums[8] = {};  // [NQ, NK], the rest 0
    for (int64_t i = 0; i < vector_end; i += 8) {
      for (int q = 0; q < NQ; ++q) {
        const Float8 x = load8(query + q * D + i);
        for (int r = 0; r < NK; ++r) sums[q * NK + r] += x * load8(k + r * ld + i);
      }
    }
    const Float8 dots = lane_sums(sums);
    for (int q = 0; q < NQ; ++q) {
      for (int r = 0; r < NK; ++r) {
        float dot = dots[q * NK + r];
        for (int64_t i = vector_end; i < D; ++i) dot += query[q * D + i] * k[r * ld + i];
        scores[q * ld_scores + j + r] = scale * dot;
      }
    }
  }
  for (; j < count; ++j) {
    const float* k = keys + j * ld;
    for (int q = 0; q < NQ; ++q) {
      float dot = 0;
#pragma omp simd reduction(+ : dot)
      for (int64_t i = 0; i < D; ++i) dot += query[q * D + i] * k[i];
      scores[q * ld_scores + j] = scale * dot;
    }
  }
}

// out[q * D + i] += sum over j < count of weights[q * ld_weights + j] * values[j * ld + i] for NQ heads. The
// dimensions are swept 64 / NQ at a time, so that the NQ x (8 / NQ) vector sums stay in registers across the
// keys.
template <int NQ>
void decode_weighted_sum(const float* weights, int64_t ld_weights, const float* values, int64_t ld,
                         int64_t count, int64_t D, float* out) {
  constexpr int64_t kVectors = 8 / NQ, kChunk = 8 * kVectors;
  int64_t i0 = 0;
  for (; i0 + kChunk <= D; i0 += kChunk) {
    Float8 sums[NQ][kVectors];
    for (int q = 0; q < NQ; ++q)
      for (int64_t c = 0; c < kVectors; ++c) sums[q][c] = load8(out + q * D + i0 + 8 * c);
    for (int64_t j = 0; j < count; ++j) {
      Float8 value[kVectors];
      for (int64_t c = 0; c < kVectors; ++c) value[c] = load8(values + j * ld + i0 + 8 * c);
      for (int q = 0; q < NQ; ++q) {
        const Float8 w = splat(weights[q * ld_weights + j]);
        for (int64_t c = 0; c < kVectors; ++c) sums[q][c] += w * value[c];
      }
    }
    for (int q = 0; q < NQ; ++q)
      for (int64_t c = 0; c < kVectors; ++c) store8(out + q * D + i0 + 8 * c, sums[q][c]);
  }
  for (int64_t j = 0; j < count; ++j) {
    for (int q = 0; q < NQ; ++q) {
      const float w = weights[q * ld_weights + j];
      for (int64_t i = i0; i < D; ++i) out[q * D + i] += w * values[j * ld + i];
    }
  }
}

// kernel(h, NQ) over a group's heads [first, end), 4, 2 or 1 at a time.
template <class Kernel>
void in_head_passes(int64_t first, int64_t end, Kernel&& kernel) {
  for (int64_t h = first; h < end;) {
    if (end - h >= 4) {
      kernel(h, std::integral_constant<int, 4>{});
      h += 4;
    } else if (end - h >= 2) {
      kernel(h, std::integral_constant<int, 2>{});
      h += 2;
    } else {
      kernel(h, std::integral_constant<int, 1>{});
      h += 1;
    }
  }
}

// kernel(j0, count, g, h, NQ) for the blocks [j0, j0 + count) of the cache rows [k0, k1) (the next block's
// rows prefetched first), and in each block for every group g's heads from h, NQ of them (see
// in_head_passes).
template <class Kernel>
void over_blocks(const float* rows, int64_t k0, int64_t k1, const AttentionShape& shape, Kernel&& kernel) {
  const int64_t KV = shape.kv_heads, groups = shape.heads / KV, row = KV * shape.head_dim;
  for (int64_t j0 = k0; j0 < k1; j0 += kDecodeKeys) {
    const int64_t count = std::min(kDecodeKeys, k1 - j0);
    const float* next = rows + (j0 + count) * row;
    for (int64_t i = 0; i < std::min(kDecodeKeys, k1 - j0 - count) * row; i += 16)
      __builtin_prefetch(next + i);
    for (int64_t g = 0; g < KV; ++g)
      in_head_passes(g * groups, (g + 1) * groups, [&](int64_t h, auto nq) { kernel(j0, count, g, h, nq); });
  }
}

// out[i] /= sum for i < D, or 0 where the sum is 0 (nothing attended to).
void divide_by_sum(float* out, int64_t D, float sum) {
  const float inverse = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int64_t i = 0; i < D; ++i) out[i] *= inverse;
}

// One query position's heads (q [H, D]) attending to the cache rows [k0, k1) (keys and values [*, KV, D]):
// out [H, D] the values weighted by exp(score - max[h]), and max and sum [H] of each head's scores and
// weights (max -inf, sum 0 and out 0 for an empty range). scores [H, k1 - k0] is scratch.
void decode_range(const float* q, const float* keys, const float* values, int64_t k0, int64_t k1,
                  const AttentionShape& shape, float scale, float* scores, float* out, float* max,
                  float* sum) {
  const int64_t H = shape.heads, D = shape.head_dim, width = k1 - k0, row = shape.kv_heads * D;
  over_blocks(keys, k0, k1, shape, [&](int64_t j0, int64_t count, int64_t g, int64_t h, auto nq) {
    decode_scores<decltype(nq)::value>(q + h * D, keys + j0 * row + g * D, row, count, D, scale,
                                       scores + h * width + (j0 - k0), width);
  });
  for (int64_t h = 0; h < H; ++h) {
    float* head_scores = scores + h * width;
    max[h] = row_max(head_scores, width);
    sum[h] = width > 0 ? exp_shifted(head_scores, width, max[h], 1.0f, head_scores) : 0.0f;
  }
  std::fill(out, out + H * D, 0.0f);
  over_blocks(values, k0, k1, shape, [&](int64_t j0, int64_t count, int64_t g, int64_t h, auto nq) {
    decode_weighted_sum<decltype(nq)::value>(scores + h * width + (j0 - k0), width, values + j0 * row + g * D,
                                             row, count, D, out + h * D);
  });
}

}  // namespace

void CpuOps::attention_decode(const float* q, const float* const* keys, const float* const* values,
                              const int64_t* lengths, const AttentionShape& shape, float scale, float* out) {
  const int64_t B = shape.batch, H = shape.heads, D = shape.head_dim;
  const auto first_key = [&](int64_t b) {
    return shape.window > 0 ? std::max<int64_t>(0, lengths[b] - shape.window) : 0;
  };
  int64_t widest = 0;
  for (int64_t b = 0; b < B; ++b) widest = std::max(widest, lengths[b] - first_key(b));
  const int64_t threads = omp_get_max_threads();
  const int64_t splits =
      B >= threads ? 1 : std::clamp<int64_t>(widest / kDecodeSplitKeys, 1, (threads + B - 1) / B);
  // [B, splits, H] each key range's score max and weight sum, and [B, splits, H, D] its weighted values where
  // a sequence's keys are split (out itself where not).
  const int64_t ranges = B * splits;
  float* range_max = thread_scratch(size_t(ranges * H), 2);
  float* range_sum = thread_scratch(size_t(ranges * H), 3);
  float* range_out = splits > 1 ? thread_scratch(size_t(ranges * H * D), 4) : out;
#pragma omp parallel for schedule(static)
  for (int64_t range = 0; range < ranges; ++range) {
    const int64_t b = range / splits, split = range % splits, first = first_key(b),
                  width = lengths[b] - first;
    const int64_t k0 = first + width * split / splits, k1 = first + width * (split + 1) / splits;
    float* sum = range_sum + range * H;
    float* o = range_out + range * H * D;
    decode_range(q + b * H * D, keys[b], values[b], k0, k1, shape, scale,
                 thread_scratch(size_t(H * (k1 - k0)), 0), o, range_max + range * H, sum);
    if (splits > 1) continue;
    for (int64_t h = 0; h < H; ++h) divide_by_sum(o + h * D, D, sum[h]);
  }
  if (splits == 1) return;
  // Each head's ranges merged: their sums rescaled to the largest max.
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      float largest = -std::numeric_limits<float>::infinity(), total = 0.0f;
      for (int64_t split = 0; split < splits; ++split)
        largest = std::max(largest, range_max[(b * splits + split) * H + h]);
      float* o = out + (b * H + h) * D;
      std::fill(o, o + D, 0.0f);
      for (int64_t split = 0; split < splits; ++split) {
        const int64_t at = (b * splits + split) * H + h;
        if (range_sum[at] == 0.0f) continue;  // an empty range
        const float weight = vexp(range_max[at] - largest);
        total += weight * range_sum[at];
        for (int64_t i = 0; i < D; ++i) o[i] += weight * range_out[at * D + i];
      }
      divide_by_sum(o, D, total);
    }
  }
}

}  // namespace zaya
