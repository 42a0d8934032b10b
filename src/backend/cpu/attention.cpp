// Causal GQA softmax attention with sliding windows and key padding, forward and backward, in blocks of
// queries so memory stays O(block x seq) and the masked upper triangle is never computed. The query heads
// that share a key-value head (a GQA group) go together: a block of positions of all of them is one left
// operand, so one product per block serves the group. The backward pass recomputes the probabilities from
// the saved log-sum-exp (as flash attention does). In bf16 the products read bf16 operands (q, k, v and
// the output gradient rounded once per call, probabilities and score gradients once per block) and sum in
// f32; masking, softmax and log-sum-exp stay f32.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "backend/cpu/bf16_products.h"
#include "backend/cpu/cpu_ops.h"
#include "core/vec_math.h"

namespace zaya {
namespace {

// Query positions per block, and the most rows (positions x heads of a group) a block stacks. Stacking a
// group's heads makes fewer, larger products: on `medium` (4 heads a group, 32 positions a block) a layer's
// bf16 attention ran 13% faster than with one head of 64 positions a product; 128 rows did as well as 64
// and better than 256 (whose buffers spill out of L2). A larger group takes fewer positions.
constexpr int64_t kQueryBlock = 64, kStackedRows = 128;

// In bf16 a block's rows are also a multiple of 16, the step of the sizes up to 256 that the bf16 products
// make primitives for (bf16_fixed_size; other sizes go through oneDNN's runtime-size kernels, slower at these
// small shapes; a search for a fixed size among the multiples of a large odd group would never end):
// with groups of 3, 42 positions (126 rows) took 12-17% longer than 32 (96 rows), forward and backward, on
// a layer of 4 x 512 tokens. f32 products have no such sizes, and keep their blocks (and their exact sums).
constexpr int64_t kBf16SizeStep = 16;

int64_t positions_per_block(int64_t groups, Precision precision) {
  const int64_t positions = std::clamp<int64_t>(kStackedRows / groups, 1, kQueryBlock);
  if (precision != Precision::BF16) return positions;
  const int64_t step = kBf16SizeStep / std::gcd(groups, kBf16SizeStep);
  return std::max(step, positions / step * step);
}

// The keys query i may see: [first_key(i), i], minus padded ones.
struct KeyRange {
  int64_t window;
  int64_t first(int64_t i) const { return window > 0 ? std::max<int64_t>(0, i - window + 1) : 0; }
};

// One group's queries in a block: positions [i0, i1) of the heads [g * groups, (g + 1) * groups) stacked
// position-major (row r is position i0 + r / groups of head g * groups + r % groups), against keys [k0, i1).
struct QueryBlock {
  int64_t i0, i1, k0, g, groups;

  QueryBlock(int64_t blk, int64_t g, const AttentionShape& shape, Precision precision, const KeyRange& range)
      : g(g), groups(shape.heads / shape.kv_heads) {
    const int64_t positions = positions_per_block(groups, precision);
    i0 = blk * positions;
    i1 = std::min(shape.seq, i0 + positions);
    k0 = range.first(i0);
    // In a sliding window the block's first key moves with i0; in bf16 it starts at a multiple of 16 too,
    // so that the keys (rows or depth of the products) come in multiples of 16 as the rows do (4-7% less
    // time backward in a window of 256). The keys added before it lie outside every row's visible run.
    if (precision == Precision::BF16) k0 = k0 / kBf16SizeStep * kBf16SizeStep;
  }
  static int64_t count(const AttentionShape& shape, Precision precision) {
    const int64_t positions = positions_per_block(shape.heads / shape.kv_heads, precision);
    return (shape.seq + positions - 1) / positions;
  }
  // The most rows of any block, for sizing buffers.
  static int64_t most_rows(const AttentionShape& shape, Precision precision) {
    const int64_t groups = shape.heads / shape.kv_heads;
    return positions_per_block(groups, precision) * groups;
  }

  int64_t positions() const { return i1 - i0; }
  int64_t rows() const { return positions() * groups; }
  int64_t width() const { return i1 - k0; }
  int64_t position(int64_t r) const { return i0 + r / groups; }
  int64_t head(int64_t r) const { return g * groups + r % groups; }
  // Row r's first element in a [batch, seq, heads, D] tensor, for sequence b.
  int64_t at(int64_t b, int64_t r, const AttentionShape& shape) const {
    return ((b * shape.seq + position(r)) * shape.heads + head(r)) * shape.head_dim;
  }
  // Writes the block's rows [rows, D] (dense) to their places in a [batch, seq, heads, D] tensor: the
  // group's heads are adjacent there, so each position is one run of groups * D floats.
  void scatter(const float* block, int64_t b, const AttentionShape& shape, float* out) const {
    const int64_t run = groups * shape.head_dim;
    for (int64_t p = 0; p < positions(); ++p)
      std::memcpy(out + at(b, p * groups, shape), block + p * run, size_t(run) * sizeof(float));
  }
};

// A per-thread buffer (slots 0-4) that keeps its capacity, so steady-state steps allocate nothing.
float* thread_scratch(size_t floats, int slot) {
  thread_local std::vector<float> buffers[5];
  std::vector<float>& buffer = buffers[slot];
  if (buffer.size() < floats) buffer.resize(floats);
  return buffer.data();
}

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The keys query i may see, as columns [lo, hi) of a block row holding keys [k0, k0 + width): one run
// (future and out-of-window keys lie outside it), less padded keys inside it.
struct VisibleRun {
  int64_t lo, hi;
  VisibleRun(int64_t i, int64_t k0, int64_t width, const KeyRange& range)
      : lo(range.first(i) - k0), hi(std::min(i + 1 - k0, width)) {}
  int64_t size() const { return hi - lo; }
};

// Sets the padded keys of a row's visible run to -inf (nothing to do without a key mask), and zeroes the
// row outside the run: the probabilities there, once the run is exponentiated.
void mask_row(float* row, int64_t k0, int64_t width, const VisibleRun& run, const float* key_mask) {
  std::fill(row, row + run.lo, 0.0f);
  std::fill(row + run.hi, row + width, 0.0f);
  if (!key_mask) return;
  const float* mask = key_mask + k0;
#pragma omp simd
  for (int64_t c = run.lo; c < run.hi; ++c) row[c] = mask[c] != 0.0f ? row[c] : kNegInf;
}

// A product operand: its first element, its row stride, and whether it is stored transposed.
struct MatrixView {
  Operand data;
  int64_t ld;
  Trans trans;
};

// q, k, v or the output gradient ([batch, seq, heads, D] f32) as product operands, copied once per call
// (rounded to bf16 in bf16) into [batch, heads / stack, seq, stack, D]: the `stack` adjacent heads of a
// group (a key-value head's query heads; 1 for keys and values) lie together at each position, so that the
// positions [s, s + n) of a group are one dense [n * stack, D] block, in a QueryBlock's row order. Dense
// operands also keep oneDNN on its fast kernels (strided ones fall to a path 3-10x slower at these sizes).
class HeadOperand {
 public:
  HeadOperand(Precision precision, const float* x, const AttentionShape& shape, int64_t heads, int64_t stack,
              AlignedBuffer& buffer, MemoryResource& memory)
      : seq_(shape.seq), groups_(heads / stack), dim_(shape.head_dim), run_(stack * shape.head_dim) {
    const bool bf16 = precision == Precision::BF16;
    const size_t elements = size_t(shape.batch * seq_ * heads * dim_);
    const size_t bytes = elements * (bf16 ? sizeof(BFloat16) : sizeof(float));
    if (buffer.size() < bytes) buffer = AlignedBuffer(bytes, memory);
    copy_ = bf16 ? Operand(buffer.as<BFloat16>()) : Operand(buffer.as<float>());
#pragma omp parallel for collapse(2) schedule(static)
    for (int64_t b = 0; b < shape.batch; ++b) {
      for (int64_t s = 0; s < seq_; ++s) {
        for (int64_t g = 0; g < groups_; ++g) {
          const float* source = x + ((b * seq_ + s) * groups_ + g) * run_;
          if (bf16) {
            round_to_bf16(source, run_, buffer.as<BFloat16>() + offset(b, s, g));
          } else {
            std::memcpy(buffer.as<float>() + offset(b, s, g), source, size_t(run_) * sizeof(float));
          }
        }
      }
    }
  }

  // Positions [s, s + n) of group g as rows [n * stack, D], or as columns [D, n * stack].
  MatrixView rows(int64_t b, int64_t s, int64_t g) const {
    return {copy_.offset(offset(b, s, g)), dim_, Trans::No};
  }
  MatrixView columns(int64_t b, int64_t s, int64_t g) const {
    return {copy_.offset(offset(b, s, g)), dim_, Trans::Yes};
  }

 private:
  int64_t offset(int64_t b, int64_t s, int64_t g) const {
    return ((b * groups_ + g) * seq_ + s) * run_;
  }

  int64_t seq_, groups_, dim_, run_;
  Operand copy_;
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

// dst[c * ld_dst + r] = x[r * ld_src + c] rounded to bf16 (to nearest even; NaN stays NaN, quieted) for
// r, c < 8: an 8 x 8 transpose in registers, then each column rounded and narrowed as one vector (a medium
// layer's bf16 backward took 2-8% longer with a scalar tiled transpose, and 3-8% longer storing each column
// and calling round_to_bf16 on it, even inline: hence its rounding again here, in registers).
void transpose_to_bf16_8x8(const float* x, int64_t ld_src, BFloat16* dst, int64_t ld_dst) {
  __m256 row[8];
  for (int i = 0; i < 8; ++i) row[i] = _mm256_loadu_ps(x + i * ld_src);
  __m256 pairs[8], quads[8];
  for (int i = 0; i < 8; i += 2) {
    pairs[i] = _mm256_unpacklo_ps(row[i], row[i + 1]);
    pairs[i + 1] = _mm256_unpackhi_ps(row[i], row[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    for (int j = 0; j < 2; ++j) {
      quads[i + j] = _mm256_shuffle_ps(pairs[i + j], pairs[i + j + 2], _MM_SHUFFLE(1, 0, 1, 0));
      quads[i + j + 2] = _mm256_shuffle_ps(pairs[i + j], pairs[i + j + 2], _MM_SHUFFLE(3, 2, 3, 2));
    }
  }
  // quads[0..3] hold columns (0, 4), (2, 6), (1, 5), (3, 7) of rows 0-3 in their halves; quads[4..7] rows
  // 4-7.
  const int order[4] = {0, 2, 1, 3};
  const __m256i low_bit = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
  const __m256i magnitude = _mm256_set1_epi32(0x7fffffff), infinity = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  for (int q = 0; q < 4; ++q) {
    const __m256 halves[2] = {_mm256_permute2f128_ps(quads[order[q]], quads[order[q] + 4], 0x20),
                              _mm256_permute2f128_ps(quads[order[q]], quads[order[q] + 4], 0x31)};
    for (int h = 0; h < 2; ++h) {
      const __m256i bits = _mm256_castps_si256(halves[h]);
      const __m256i upper = _mm256_srli_epi32(bits, 16);
      const __m256i rounded = _mm256_srli_epi32(
          _mm256_add_epi32(_mm256_add_epi32(bits, bias), _mm256_and_si256(upper, low_bit)), 16);
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, magnitude), infinity);
      const __m256i narrow = _mm256_blendv_epi8(rounded, _mm256_or_si256(upper, quiet), nan);
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(narrow, narrow), 0x08);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (q + 4 * h) * ld_dst),
                       _mm256_castsi256_si128(packed));
    }
  }
}

// The transpose [width, rows] of a block of f32 values [rows, width] as a left operand: the values in place
// read transposed (f32), or (bf16) rounded into a transposed copy in a per-thread buffer, 8 x 8 at a time
// (a transposed left operand, too, keeps oneDNN off AMX).
MatrixView transposed(Precision precision, const float* x, int64_t rows, int64_t width, int slot) {
  if (precision == Precision::F32) return {x, width, Trans::Yes};
  thread_local std::vector<BFloat16> buffers[2];
  std::vector<BFloat16>& buffer = buffers[slot];
  if (buffer.size() < size_t(rows * width)) buffer.resize(size_t(rows * width));
  BFloat16* out = buffer.data();
  const int64_t whole_rows = rows / 8 * 8, whole_columns = width / 8 * 8;
  for (int64_t r = 0; r < whole_rows; r += 8) {
    for (int64_t c = 0; c < whole_columns; c += 8)
      transpose_to_bf16_8x8(x + r * width + c, width, out + c * rows + r, rows);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t first = r < whole_rows ? whole_columns : 0;
    for (int64_t c = first; c < width; ++c) out[c * rows + r].bits = f32_to_bf16(x[r * width + c]);
  }
  return {out, rows, Trans::No};
}

}  // namespace

void CpuOps::attention_forward(Precision precision, const float* q, const float* k, const float* v,
                               const float* key_mask, const AttentionShape& shape, float scale, float* o,
                               float* lse) {
  const int64_t S = shape.seq, H = shape.heads, KV = shape.kv_heads, D = shape.head_dim;
  const int64_t groups = H / KV, blocks = QueryBlock::count(shape, precision),
                most_rows = QueryBlock::most_rows(shape, precision);
  const KeyRange range{shape.window};
  const HeadOperand q_in(precision, q, shape, H, groups, attention_operands_[0], memory());
  const HeadOperand k_in(precision, k, shape, KV, 1, attention_operands_[1], memory());
  const HeadOperand v_in(precision, v, shape, KV, 1, attention_operands_[2], memory());
  auto product = [&](int64_t m, int64_t n, int64_t depth, float alpha, const MatrixView& a,
                     const MatrixView& b, float* c, int64_t ldc) {
    gemm_on_this_thread(precision, a.trans, b.trans, m, n, depth, alpha, a.data, a.ld, b.data, b.ld, 0.0f, c,
                        ldc);
  };

#pragma omp parallel for collapse(3) schedule(dynamic)
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t g = 0; g < KV; ++g) {
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const QueryBlock block(blk, g, shape, precision, range);
        const int64_t rows = block.rows(), width = block.width();
        const float* mask = key_mask ? key_mask + b * S : nullptr;
        float* scores = thread_scratch(size_t(most_rows * S), 0);
        product(rows, width, D, scale, q_in.rows(b, block.i0, g), k_in.columns(b, block.k0, g), scores,
                width);
        float* inv_sums = thread_scratch(size_t(most_rows), 2);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = block.position(r);
          const VisibleRun run(i, block.k0, width, range);
          float* row = scores + r * width;
          float& row_lse = lse[(b * H + block.head(r)) * S + i];
          mask_row(row, block.k0, width, run, mask);
          const float max = row_max(row + run.lo, run.size());
          if (max == kNegInf) {  // a row that sees no key at all: zero output
            std::fill(row, row + width, 0.0f);
            inv_sums[r] = 0.0f;
            row_lse = kNegInf;
            continue;
          }
          const float sum = exp_shifted(row + run.lo, run.size(), max, 1.0f, row + run.lo);
          inv_sums[r] = 1.0f / sum;
          row_lse = max + std::log(sum);
        }
        // The output from the unnormalised probabilities, each row then divided by its sum (D values a row,
        // where normalising the probabilities first would touch `width`).
        float* o_blk = thread_scratch(size_t(most_rows * D), 1);
        product(rows, D, width, 1.0f, block_operand(precision, scores, rows, width, 0),
                v_in.rows(b, block.k0, g), o_blk, D);
        for (int64_t r = 0; r < rows; ++r) {
#pragma omp simd
          for (int64_t c = 0; c < D; ++c) o_blk[r * D + c] *= inv_sums[r];
        }
        block.scatter(o_blk, b, shape, o);
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
  const int64_t groups = H / KV, blocks = QueryBlock::count(shape, precision),
                most_rows = QueryBlock::most_rows(shape, precision);
  const KeyRange range{shape.window};
  const HeadOperand q_in(precision, q, shape, H, groups, attention_operands_[0], memory());
  const HeadOperand k_in(precision, k, shape, KV, 1, attention_operands_[1], memory());
  const HeadOperand v_in(precision, v, shape, KV, 1, attention_operands_[2], memory());
  const HeadOperand dout_in(precision, dout, shape, H, groups, attention_operands_[3], memory());
  auto product = [&](int64_t m, int64_t n, int64_t depth, float alpha, const MatrixView& a,
                     const MatrixView& b, float beta, float* c, int64_t ldc) {
    gemm_on_this_thread(precision, a.trans, b.trans, m, n, depth, alpha, a.data, a.ld, b.data, b.ld, beta, c,
                        ldc);
  };

#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < shape.batch; ++b) {
    for (int64_t g = 0; g < KV; ++g) {
      const float* mask = key_mask ? key_mask + b * S : nullptr;
      float* probs = thread_scratch(size_t(most_rows * S), 0);
      float* dprobs = thread_scratch(size_t(most_rows * S), 1);
      float* dq_blk = thread_scratch(size_t(most_rows * D), 2);
      // This key-value head's dK and dV [S, D], dense; copied out at the end.
      float* dk_g = thread_scratch(size_t(S * D), 3);
      float* dv_g = thread_scratch(size_t(S * D), 4);
      std::fill(dk_g, dk_g + S * D, 0.0f);
      std::fill(dv_g, dv_g + S * D, 0.0f);
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const QueryBlock block(blk, g, shape, precision, range);
        const int64_t rows = block.rows(), width = block.width(), k0 = block.k0;
        product(rows, width, D, scale, q_in.rows(b, block.i0, g), k_in.columns(b, k0, g), 0.0f, probs, width);
        product(rows, width, D, 1.0f, dout_in.rows(b, block.i0, g), v_in.columns(b, k0, g), 0.0f, dprobs,
                width);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = block.position(r), at = block.at(b, r, shape);
          float* p = probs + r * width;
          float* ds = dprobs + r * width;
          const float row_lse = lse[(b * H + block.head(r)) * S + i];
          if (row_lse == kNegInf) {  // a row that sees no key: no probability, no gradient
            std::fill(p, p + width, 0.0f);
            std::fill(ds, ds + width, 0.0f);
            continue;
          }
          const VisibleRun run(i, k0, width, range);
          mask_row(p, k0, width, run, mask);
          exp_shifted(p + run.lo, run.size(), row_lse, 1.0f, p + run.lo);
          float dot = 0;
#pragma omp simd reduction(+ : dot)
          for (int64_t c = 0; c < D; ++c) dot += dout[at + c] * o[at + c];
#pragma omp simd
          for (int64_t j = 0; j < width; ++j) ds[j] = p[j] * (ds[j] - dot);
        }
        const MatrixView ds_in = block_operand(precision, dprobs, rows, width, 0);
        product(rows, D, width, scale, ds_in, k_in.rows(b, k0, g), 0.0f, dq_blk, D);
        block.scatter(dq_blk, b, shape, dq);
        product(width, D, rows, scale, transposed(precision, dprobs, rows, width, 0),
                q_in.rows(b, block.i0, g), 1.0f, dk_g + k0 * D, D);
        product(width, D, rows, 1.0f, transposed(precision, probs, rows, width, 1),
                dout_in.rows(b, block.i0, g), 1.0f, dv_g + k0 * D, D);
      }
      for (int64_t s = 0; s < S; ++s) {
        std::memcpy(dk + ((b * S + s) * KV + g) * D, dk_g + s * D, size_t(D) * sizeof(float));
        std::memcpy(dv + ((b * S + s) * KV + g) * D, dv_g + s * D, size_t(D) * sizeof(float));
      }
    }
  }
}

namespace {

// Decoding reads a cache in order, both passes (the scores, then after the softmax the value sums) in blocks
// of kDecodeKeys positions whose whole rows (every key-value head) are used before the next block, which is
// prefetched meanwhile: the hardware prefetcher alone left the cores waiting on memory. A group's heads are
// taken NQ at a time, so that each key or value vector loaded serves NQ queries.
constexpr int64_t kDecodeKeys = 4;
// A sequence's keys are cut into ranges of at least kDecodeRangeKeys keys, at most kMostDecodeRanges of
// them, by its own cache length alone (never by the thread count or the other sequences of the batch, so that
// a sequence decodes to the same bits whoever shares its steps): a long cache is shared among the threads
// even for one sequence, and the ranges' results are merged by their log-sum-exp.
constexpr int64_t kDecodeRangeKeys = 256, kMostDecodeRanges = 16;

int64_t decode_ranges(int64_t keys) {
  return std::clamp<int64_t>(keys / kDecodeRangeKeys, 1, kMostDecodeRanges);
}

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
  // Sequence b's ranges are [first_range[b], first_range[b + 1]): the calling thread's vector, which the
  // parallel loop reads through this reference (a thread_local named inside it would be each thread's own).
  thread_local std::vector<int64_t> first_range_storage;
  std::vector<int64_t>& first_range = first_range_storage;
  first_range.assign(size_t(B + 1), 0);
  for (int64_t b = 0; b < B; ++b)
    first_range[b + 1] = first_range[b] + decode_ranges(lengths[b] - first_key(b));
  const int64_t ranges = first_range[B];
  // [ranges, H] each range's score max and weight sum, and [ranges, H, D] its weighted values where a
  // sequence has several ranges (out itself where it has one).
  float* range_max = thread_scratch(size_t(ranges * H), 2);
  float* range_sum = thread_scratch(size_t(ranges * H), 3);
  float* range_out = thread_scratch(size_t(ranges * H * D), 4);
#pragma omp parallel for schedule(static)
  for (int64_t range = 0; range < ranges; ++range) {
    const int64_t b =
        std::upper_bound(first_range.begin(), first_range.end(), range) - first_range.begin() - 1;
    const int64_t splits = first_range[b + 1] - first_range[b], split = range - first_range[b];
    const int64_t first = first_key(b), width = lengths[b] - first;
    const int64_t k0 = first + width * split / splits, k1 = first + width * (split + 1) / splits;
    float* sum = range_sum + range * H;
    float* o = splits > 1 ? range_out + range * H * D : out + b * H * D;
    decode_range(q + b * H * D, keys[b], values[b], k0, k1, shape, scale,
                 thread_scratch(size_t(H * (k1 - k0)), 0), o, range_max + range * H, sum);
    if (splits > 1) continue;
    for (int64_t h = 0; h < H; ++h) divide_by_sum(o + h * D, D, sum[h]);
  }
  // Each head's ranges merged in order: their sums rescaled to the largest max.
  for (int64_t b = 0; b < B; ++b) {
    const int64_t begin = first_range[b], end = first_range[b + 1];
    if (end - begin == 1) continue;
    for (int64_t h = 0; h < H; ++h) {
      float largest = kNegInf, total = 0.0f;
      for (int64_t range = begin; range < end; ++range) largest = std::max(largest, range_max[range * H + h]);
      float* o = out + (b * H + h) * D;
      std::fill(o, o + D, 0.0f);
      for (int64_t range = begin; range < end; ++range) {
        const int64_t at = range * H + h;
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
