#include "backend/cpu/bf16_products.h"

#include <immintrin.h>
#include <omp.h>

#include <bit>
#include <cstring>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/vec_math.h"
#include "core/buffer.h"
#include "core/error.h"

namespace zaya {

bool bf16_fixed_size(int64_t size) {
  const int64_t step = size <= 256 ? 16 : int64_t(std::bit_floor(uint64_t(size))) / 16;
  return size % step == 0;
}

namespace {

using dnnl::memory;

// A size given when the product runs, not when its primitive is made (oneDNN's runtime dimension).
constexpr int64_t kRuntime = DNNL_RUNTIME_DIM_VAL;

// Everything that decides a primitive: the shape (m and k may be kRuntime), the layouts and the two scalars.
struct Key {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  uint32_t alpha_bits, beta_bits;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = size_t(key.trans_a) * 2 + size_t(key.trans_b);
    for (int64_t v :
         {key.m, key.n, key.k, key.lda, key.ldb, key.ldc, int64_t(key.alpha_bits), int64_t(key.beta_bits)}) {
      h = h * 1000003u ^ std::hash<int64_t>()(v);
    }
    return h;
  }
};

// A row-major [rows, cols] matrix with row stride ld, stored or read transposed.
memory::desc matrix_desc(int64_t rows, int64_t cols, int64_t ld, bool transposed, memory::data_type type) {
  const memory::dims strides = transposed ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, type, strides);
}

// Whether this CPU runs the AVX512-BF16 kernels here (with the AVX512 BW and DQ instructions they also use,
// which every CPU with AVX512-BF16 has): asked once.
bool cpu_has_avx512_bf16() {
  static const bool has = __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq");
  return has;
}

void round_to_bf16_portable(const float* src, int64_t count, BFloat16* dst) {
#pragma omp simd
  for (int64_t i = 0; i < count; ++i) {
    uint32_t bits;
    std::memcpy(&bits, src + i, sizeof bits);
    const uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const uint32_t quiet_nan = (bits >> 16) | 0x40u;
    dst[i].bits = uint16_t((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
  }
}

// vcvtneps2bf16 rounds to nearest even and quiets a NaN as the portable loop does, 3.4x as fast on rows in
// L1 (2048 floats: 0.09 against 0.32 us), but reads a denormal input as zero: 16 values with one among them
// go the portable way, so that every input has the same bits on every CPU (checked over all 2^32 floats).
__attribute__((target("avx512f,avx512dq,avx512bf16"))) void round_to_bf16_avx512(const float* src,
                                                                                 int64_t count,
                                                                                 BFloat16* dst) {
  constexpr int kDenormal = 0x20;  // vfpclassps: a denormal of either sign
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m512 values = _mm512_loadu_ps(src + i);
    if (_mm512_fpclass_ps_mask(values, kDenormal) != 0) {
      round_to_bf16_portable(src + i, 16, dst + i);
      continue;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), (__m256i)_mm512_cvtneps_pbh(values));
  }
  round_to_bf16_portable(src + i, count - i, dst + i);
}

}  // namespace

void round_to_bf16(const float* src, int64_t count, BFloat16* dst) {
  cpu_has_avx512_bf16() ? round_to_bf16_avx512(src, count, dst) : round_to_bf16_portable(src, count, dst);
}

namespace {

// Rounds a stored f32 [rows, cols] matrix with row stride ld into bf16 with the same layout (the
// product's primitive is then the one its bf16 copy would use: with runtime sizes, a stride of its own
// would make a primitive per size).
void round_matrix_to_bf16(const float* src, int64_t rows, int64_t cols, int64_t ld,
                          std::vector<BFloat16>& out) {
  out.resize(size_t((rows - 1) * ld + cols));
  BFloat16* dst = out.data();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) round_to_bf16(src + r * ld, cols, dst + r * ld);
}

}  // namespace

// A primitive and the size of the scratchpad it asks for (user-managed, so that threads can run it at once).
struct Primitive {
  dnnl::matmul matmul;
  memory::desc scratchpad;
};

// What one thread needs to run pieces: its stream, its scratchpad, and the memory objects of each
// fixed-shape primitive it has run (made once: a step runs thousands of products). Pieces run concurrently
// from the threads of a parallel loop (a product's pieces, Muon's Newton-Schulz), one workspace each.
struct Workspace {
  std::mutex mutex;  // threads outside OpenMP regions share workspace 0
  dnnl::stream stream;
  struct Bound {
    memory a, b, c, scratchpad;
  };
  std::unordered_map<const Primitive*, Bound> bound;
  AlignedBuffer scratchpad;  // the primitives' scratchpad

  explicit Workspace(const dnnl::engine& engine) : stream(engine) {}
};

struct Bf16Products::State {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  mutable std::mutex mutex;  // guards the two containers; each workspace has its own
  std::unordered_map<Key, Primitive, KeyHash> primitives;  // nodes never move: references stay valid
  std::vector<std::unique_ptr<Workspace>> workspaces;      // by OpenMP thread number

  const Primitive& primitive(const Key& key) {
    std::lock_guard lock(mutex);
    auto it = primitives.find(key);
    if (it != primitives.end()) return it->second;
    const auto bf16 = memory::data_type::bf16;
    const memory::desc a_md = matrix_desc(key.m, key.k, key.lda, key.trans_a, bf16);
    const memory::desc b_md = matrix_desc(key.k, key.n, key.ldb, key.trans_b, bf16);
    const memory::desc c_md = matrix_desc(key.m, key.n, key.ldc, false, memory::data_type::f32);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const float alpha = std::bit_cast<float>(key.alpha_bits), beta = std::bit_cast<float>(key.beta_bits);
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops post;
      post.append_sum(beta);
      attr.set_post_ops(post);
    }
    try {
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
      return primitives.emplace(key, Primitive{dnnl::matmul(pd), pd.scratchpad_desc()}).first->second;
    } catch (const dnnl::error& e) {
      throw Error(cat("oneDNN has no bf16 matmul for this CPU (", e.what(), "); use precision \"fp32\""));
    }
  }

  Workspace& workspace() {
    const size_t index = omp_in_parallel() ? size_t(omp_get_thread_num()) : 0;
    std::lock_guard lock(mutex);
    if (workspaces.size() <= index) workspaces.resize(index + 1);
    if (!workspaces[index]) workspaces[index] = std::make_unique<Workspace>(engine);
    return *workspaces[index];
  }
};

namespace {

// Decoding multiplies a few rows (one per sequence) by each weight matrix: the product is the time it takes
// to read the weights once. oneDNN reorders the whole bf16 matrix into its blocked layout on every call,
// which reads and writes it twice more; this streams each weight row once instead. A is rounded to bf16 as in
// every bf16 product; the sums are f32. Up to 8 rows are summed in one pass, their sums in registers; up to
// kFewRows in passes over each block of weight rows while it stays in L1. A prefill's experts get that many
// (16 on average for 8 prompts of 32 tokens over `medium`'s 16 experts): against 64 [2048, 1024] experts in
// turn (BM_DecodeProductFromMemory), 16, 24, 32 and 40 rows took 250-257, 343-349, 438-490 and 555-611 us
// this way, against 269-276 (passes of 8 rows against 2 weight rows), 450-464, 504-623 and 599-640 through
// oneDNN; at 48 rows oneDNN took 670-680 us and this way 669-727.
constexpr int64_t kFewRows = 40;

// How many weight rows ahead of the ones being summed the few-row product prefetches (measured: 16 and 32
// alike, 64 lost at one row).
constexpr int64_t kFewRowsPrefetch = 16;

using Bits8 = uint16_t __attribute__((vector_size(16)));
using Wide8 = uint32_t __attribute__((vector_size(32)));

// Lane v of the result: the sum of vector v's 16 lanes, for 16 vectors at once. Four rounds of pairwise
// shuffles and adds (45 instructions) instead of 16 horizontal sums (a store and 15 dependent adds each),
// which cost as much as the dot products themselves when k is 1024. The zero-masked forms of unpack and
// shuffle_f32x4, with every lane kept, because GCC 12's header warns inside the plain ones (-Wuninitialized).
constexpr __mmask16 kAllLanes = 0xffff;

// [a0 + a1, a2 + a3, b0 + b1, b2 + b3] of a's and b's 128-bit lanes.
__attribute__((target("avx512f"))) inline __m512 add_adjacent_128(__m512 a, __m512 b) {
  return _mm512_add_ps(_mm512_maskz_shuffle_f32x4(kAllLanes, a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                       _mm512_maskz_shuffle_f32x4(kAllLanes, a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

__attribute__((target("avx512f"))) inline __m512 lane_sums(const __m512 (&v)[16]) {
  __m512 pairs[8], quads[4], octets[2];
  // Within each 128-bit lane: [a0 + a2, b0 + b2, a1 + a3, b1 + b3].
  for (int i = 0; i < 8; ++i)
    pairs[i] = _mm512_add_ps(_mm512_maskz_unpacklo_ps(kAllLanes, v[2 * i], v[2 * i + 1]),
                             _mm512_maskz_unpackhi_ps(kAllLanes, v[2 * i], v[2 * i + 1]));
  // Within each 128-bit lane: the lane's sum for vectors 4i..4i+3.
  for (int i = 0; i < 4; ++i)
    quads[i] = _mm512_add_ps(_mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  // Then across 128-bit lanes, adjacent lanes first.
  for (int i = 0; i < 2; ++i) octets[i] = add_adjacent_128(quads[2 * i], quads[2 * i + 1]);
  return add_adjacent_128(octets[0], octets[1]);
}

// 32 bf16 values from `at`, or only the first of them in `lanes` (a row's last chunk, zeros after): the
// masked load is the slower one (8 rows of `medium`'s head: 12% slower with every chunk masked).
template <bool Whole>
__attribute__((target("avx512f,avx512bw"), always_inline)) inline __m512bh load_chunk(const uint16_t* at,
                                                                                      __mmask32 lanes) {
  if constexpr (Whole) return (__m512bh)_mm512_loadu_si512(at);
  return (__m512bh)_mm512_maskz_loadu_epi16(lanes, at);
}

// One 32-wide chunk of k from p: sums[i * C + c] += row i of A . row c of W over the chunk's lanes. The
// index sequences make every array index a constant, so that GCC keeps the arrays in registers: with loops
// over i and c it kept the sums on the stack and stored all of them in every chunk (half the kernel's time).
template <int C, bool Whole, size_t... Row, size_t... Weight, size_t... Sum>
__attribute__((target("avx512f,avx512bw,avx512bf16"), always_inline)) inline void few_rows_chunk(
    const uint16_t* x, int64_t k, const uint16_t* w, int64_t ldw, int64_t p, __mmask32 lanes,
    __m512 (&sums)[16], std::index_sequence<Row...>, std::index_sequence<Weight...>,
    std::index_sequence<Sum...>) {
  const __m512bh rows[] = {load_chunk<Whole>(x + Row * k + p, lanes)...};
  const __m512bh weights[] = {load_chunk<Whole>(w + Weight * ldw + p, lanes)...};
  // The rows kFewRowsPrefetch further on, fetched into L2 while these are summed: the hardware prefetcher
  // keeps up with one stream, not with C streams a weight row apart (the 64 MB head of `medium` streamed at
  // half the speed without this, at every M; 16 rows ahead into L1 was no better).
  (_mm_prefetch(reinterpret_cast<const char*>(w + (kFewRowsPrefetch + Weight) * ldw + p), _MM_HINT_T1), ...);
  ((sums[Sum] = _mm512_dpbf16_ps(sums[Sum], rows[Sum / C], weights[Sum % C])), ...);
}

// to[v] = from[v] for every v, each index a constant (see few_rows_chunk).
template <size_t... V>
__attribute__((target("avx512f"), always_inline)) inline void copy_by_constant_indices(
    const __m512 (&from)[16], __m512 (&to)[16], std::index_sequence<V...>) {
  ((to[V] = from[V]), ...);
}

// dots[i * C + c] = row i of A (bf16, [M, k] contiguous) . row c of W (bf16, row stride ldw), for C
// consecutive weight rows at once: each A chunk loaded serves C products and each weight chunk M, and the
// M * C sums (at most 16) stay in registers. vdpbf16ps multiplies 32 pairs at once with f32 sums (every CPU
// whose bf16 products are fast here has AVX512-BF16).
template <int M, int C>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void few_rows_dots_avx512(const uint16_t* x, int64_t k,
                                                                                 const uint16_t* w,
                                                                                 int64_t ldw, float* dots) {
  static_assert(M * C <= 16);
  // Zeroed and read out by constant indices too: a loop over `sums` anywhere puts it on the stack.
  const __m512 zeros[16] = {};
  __m512 sums[16];
  copy_by_constant_indices(zeros, sums, std::make_index_sequence<16>());
  const int64_t whole_end = k / 32 * 32;
  for (int64_t p = 0; p < whole_end; p += 32) {
    few_rows_chunk<C, true>(x, k, w, ldw, p, 0, sums, std::make_index_sequence<M>(),
                            std::make_index_sequence<C>(), std::make_index_sequence<M * C>());
  }
  if (whole_end < k) {
    few_rows_chunk<C, false>(x, k, w, ldw, whole_end, (__mmask32(1) << (k - whole_end)) - 1, sums,
                             std::make_index_sequence<M>(), std::make_index_sequence<C>(),
                             std::make_index_sequence<M * C>());
  }
  __m512 last[16];  // lane_sums indexes its argument in loops
  copy_by_constant_indices(sums, last, std::make_index_sequence<16>());
  alignas(64) float all[16];
  _mm512_store_ps(all, lane_sums(last));
  std::memcpy(dots, all, sizeof(float) * M * C);
}

// The same without AVX512-BF16: 8 lanes at a time, bf16 widened to f32 (a bf16 value is the top half of a
// float), one weight row at a time.
template <int M, int C>
void few_rows_dots_portable(const uint16_t* x, int64_t k, const uint16_t* w, int64_t ldw, float* dots) {
  for (int c = 0; c < C; ++c, w += ldw) {
    Float8 sums[M] = {};
    const int64_t vector_end = k / 8 * 8;
    for (int64_t p = 0; p < vector_end; p += 8) {
      Bits8 bits;
      std::memcpy(&bits, w + p, sizeof bits);
      const Float8 weights = std::bit_cast<Float8>(__builtin_convertvector(bits, Wide8) << 16);
      for (int i = 0; i < M; ++i) {
        std::memcpy(&bits, x + i * k + p, sizeof bits);
        sums[i] += std::bit_cast<Float8>(__builtin_convertvector(bits, Wide8) << 16) * weights;
      }
    }
    for (int i = 0; i < M; ++i) {
      float sum = 0;
      for (int lane = 0; lane < 8; ++lane) sum += sums[i][lane];
      for (int64_t p = vector_end; p < k; ++p) sum += bf16_to_f32(x[i * k + p]) * bf16_to_f32(w[p]);
      dots[i * C + c] = sum;
    }
  }
}

// C[i, j0 + c] for the M rows of A and the C weight rows from j0, stored at c[i * ldc + j0 + c].
template <int M, int C>
void few_rows_block(const uint16_t* x, int64_t k, const BFloat16* b, int64_t ldb, int64_t j0, float alpha,
                    float beta, float* out, int64_t ldc, bool avx512_bf16) {
  const uint16_t* w = reinterpret_cast<const uint16_t*>(b + j0 * ldb);
  float dots[M * C];
  if (avx512_bf16) {
    few_rows_dots_avx512<M, C>(x, k, w, ldb, dots);
  } else {
    few_rows_dots_portable<M, C>(x, k, w, ldb, dots);
  }
  for (int i = 0; i < M; ++i) {
    for (int c = 0; c < C; ++c) {
      float& to = out[i * ldc + j0 + c];
      to = alpha * dots[i * C + c] + (beta == 0.0f ? 0.0f : beta * to);
    }
  }
}

// Fewer rows leave room for more weight rows at once: C = 16 / M, at most 8 (the registers that hold the
// weight chunks).
template <int M>
void few_rows_columns(const uint16_t* x, int64_t n, int64_t k, const BFloat16* b, int64_t ldb, float alpha,
                      float beta, float* c, int64_t ldc) {
  constexpr int C = 16 / M > 8 ? 8 : 16 / M;
  const bool avx512_bf16 = cpu_has_avx512_bf16();
  const int64_t blocks = n / C;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < blocks; ++block)
    few_rows_block<M, C>(x, k, b, ldb, block * C, alpha, beta, c, ldc, avx512_bf16);
  for (int64_t j = blocks * C; j < n; ++j)
    few_rows_block<M, 1>(x, k, b, ldb, j, alpha, beta, c, ldc, avx512_bf16);
}

// More rows than a pass holds: each block of kTallWeightRows weight rows is summed against the rows
// kTallPassRows at a time (4 x 4 sums in registers, each chunk loaded serving 4 of them: passes of 8 rows
// against 2 weight rows, 10 loads for 16 sums, were 7-15% slower at 16 rows).
constexpr int64_t kTallPassRows = 4, kTallWeightRows = 4;

void tall_few_rows_columns(int64_t m, const uint16_t* x, int64_t n, int64_t k, const BFloat16* b, int64_t ldb,
                           float alpha, float beta, float* c, int64_t ldc) {
  using Block = void (*)(const uint16_t*, int64_t, const BFloat16*, int64_t, int64_t, float, float, float*,
                         int64_t, bool);
  // [rows in the pass - 1]: against a block of weight rows, and against one (the rows past the last block).
  static constexpr Block kBlocks[kTallPassRows] = {
      few_rows_block<1, kTallWeightRows>, few_rows_block<2, kTallWeightRows>,
      few_rows_block<3, kTallWeightRows>, few_rows_block<4, kTallWeightRows>};
  static constexpr Block kSingles[kTallPassRows] = {few_rows_block<1, 1>, few_rows_block<2, 1>,
                                                    few_rows_block<3, 1>, few_rows_block<4, 1>};
  const bool avx512_bf16 = cpu_has_avx512_bf16();
  auto passes = [&](const Block(&blocks)[kTallPassRows], int64_t j0) {
    for (int64_t r0 = 0; r0 < m; r0 += kTallPassRows) {
      blocks[std::min(kTallPassRows, m - r0) - 1](x + r0 * k, k, b, ldb, j0, alpha, beta, c + r0 * ldc, ldc,
                                                  avx512_bf16);
    }
  };
  const int64_t blocks = n / kTallWeightRows;
#pragma omp parallel for schedule(static)
  for (int64_t block = 0; block < blocks; ++block) passes(kBlocks, block * kTallWeightRows);
  for (int64_t j = blocks * kTallWeightRows; j < n; ++j) passes(kSingles, j);
}

// C [m, n] = alpha A [m, k] B^T + beta C, B bf16 [n, k] (row stride ldb); m <= kFewRows.
void few_rows_product(int64_t m, int64_t n, int64_t k, float alpha, Operand a, int64_t lda, const BFloat16* b,
                      int64_t ldb, float beta, float* c, int64_t ldc) {
  // A's rows in bf16, contiguous: [m, k].
  thread_local std::vector<BFloat16> rows;
  rows.resize(size_t(m * k));
  for (int64_t i = 0; i < m; ++i) {
    if (a.type == DType::BF16) {
      std::memcpy(rows.data() + i * k, static_cast<const BFloat16*>(a.data) + i * lda,
                  size_t(k) * sizeof(BFloat16));
    } else {
      round_to_bf16(static_cast<const float*>(a.data) + i * lda, k, rows.data() + i * k);
    }
  }
  const uint16_t* x = reinterpret_cast<const uint16_t*>(rows.data());
  switch (m) {
    case 1:
      return few_rows_columns<1>(x, n, k, b, ldb, alpha, beta, c, ldc);
    case 2:
      return few_rows_columns<2>(x, n, k, b, ldb, alpha, beta, c, ldc);
    case 3:
      return few_rows_columns<3>(x, n, k, b, ldb, alpha, beta, c, ldc);
    case 4:
      return few_rows_columns<4>(x, n, k, b, ldb, alpha, beta, c, ldc);
    case 5:
      return few_rows_columns<5>(x, n, k, b, ldb, alpha, beta, c, ldc);
    case 6:
      return few_rows_columns<6>(x, n, k, b, ldb, alpha, beta, c, ldc);
    case 7:
      return few_rows_columns<7>(x, n, k, b, ldb, alpha, beta, c, ldc);
    case 8:
      return few_rows_columns<8>(x, n, k, b, ldb, alpha, beta, c, ldc);
    default:
      return tall_few_rows_columns(m, x, n, k, b, ldb, alpha, beta, c, ldc);
  }
}

}  // namespace

Bf16Products::Bf16Products() : state_(std::make_unique<State>()) {}
Bf16Products::~Bf16Products() = default;

int64_t Bf16Products::primitives() const {
  std::lock_guard lock(state_->mutex);
  return int64_t(state_->primitives.size());
}

void Bf16Products::run(const Product& product, ProductSplit split) {
  const int64_t m = product.m, n = product.n, k = product.k, lda = product.lda, ldb = product.ldb;
  const bool ta = product.trans_a == Trans::Yes, tb = product.trans_b == Trans::Yes;
  if (m <= kFewRows && !ta && tb) {  // each output a whole dot product: the same bits on any thread count
    if (product.b.type == DType::BF16) {
      few_rows_product(m, n, k, product.alpha, product.a, lda, static_cast<const BFloat16*>(product.b.data),
                       ldb, product.beta, product.c, product.ldc);
      return;
    }
    // An f32 weight is rounded first, so that it gives the bits its bf16 copy gives (the model passes bf16
    // copies; this serves callers that do not).
    thread_local std::vector<BFloat16> weights;  // [n, k], row stride ldb
    round_matrix_to_bf16(static_cast<const float*>(product.b.data), n, k, ldb, weights);
    few_rows_product(m, n, k, product.alpha, product.a, lda, weights.data(), ldb, product.beta, product.c,
                     product.ldc);
    return;
  }
  // A is stored [m, k] (or [k, m] transposed), B [k, n] (or [n, k]): bf16 operands are read where they are,
  // f32 ones rounded once into the calling thread's scratch, which every piece then reads.
  thread_local std::vector<BFloat16> a_rounded, b_rounded;
  Product rounded = product;
  if (product.a.type != DType::BF16) {
    const float* values = static_cast<const float*>(product.a.data);
    ta ? round_matrix_to_bf16(values, k, m, lda, a_rounded)
       : round_matrix_to_bf16(values, m, k, lda, a_rounded);
    rounded.a = a_rounded.data();
  }
  if (product.b.type != DType::BF16) {
    const float* values = static_cast<const float*>(product.b.data);
    tb ? round_matrix_to_bf16(values, n, k, ldb, b_rounded)
       : round_matrix_to_bf16(values, k, n, ldb, b_rounded);
    rounded.b = b_rounded.data();
  }
  run_product_pieces(rounded, product_pieces(split, m, n, k),
                     [this](const Product& piece) { multiply(piece); });
}

void Bf16Products::multiply(const Product& piece) {
  const int64_t m = piece.m, n = piece.n, k = piece.k;
  const bool ta = piece.trans_a == Trans::Yes, tb = piece.trans_b == Trans::Yes;
  Workspace& w = state_->workspace();
  std::lock_guard lock(w.mutex);
  // m or k of any other than a fixed size (an expert's rows) is given at run time, so that one primitive
  // serves every size and no operand is copied: oneDNN then multiplies with its gemm kernels, which ran an
  // untuned shape's expert products 3-9% faster than padding them to a bucket or splitting them at one did,
  // and their weight gradients 5-25% faster (side by side, BM_Bf16ExpertProduct's shapes).
  const bool runtime_m = !bf16_fixed_size(m), runtime_k = !bf16_fixed_size(k);
  const Key key{ta,
                tb,
                runtime_m ? kRuntime : m,
                n,
                runtime_k ? kRuntime : k,
                piece.lda,
                piece.ldb,
                piece.ldc,
                std::bit_cast<uint32_t>(piece.alpha),
                std::bit_cast<uint32_t>(piece.beta)};
  const Primitive& primitive = state_->primitive(key);
  if (w.scratchpad.size() < primitive.scratchpad.get_size())
    w.scratchpad = AlignedBuffer(primitive.scratchpad.get_size());
  const dnnl::engine& engine = state_->engine;
  auto [it, made] = w.bound.try_emplace(&primitive);
  Workspace::Bound& bound = it->second;
  if (made || runtime_m || runtime_k) {
    // A runtime size takes memory objects of this call's sizes.
    const auto bf16 = memory::data_type::bf16;
    bound = {memory(matrix_desc(m, k, piece.lda, ta, bf16), engine, nullptr),
             memory(matrix_desc(k, n, piece.ldb, tb, bf16), engine, nullptr),
             memory(matrix_desc(m, n, piece.ldc, false, memory::data_type::f32), engine, nullptr),
             memory(primitive.scratchpad, engine, nullptr)};
  }
  bound.a.set_data_handle(const_cast<void*>(piece.a.data));
  bound.b.set_data_handle(const_cast<void*>(piece.b.data));
  bound.c.set_data_handle(piece.c);
  bound.scratchpad.set_data_handle(w.scratchpad.data());
  primitive.matmul.execute(w.stream, {{DNNL_ARG_SRC, bound.a},
                                      {DNNL_ARG_WEIGHTS, bound.b},
                                      {DNNL_ARG_DST, bound.c},
                                      {DNNL_ARG_SCRATCHPAD, bound.scratchpad}});
  w.stream.wait();
}

Bf16Products& cpu_bf16_products() {
  static Bf16Products matmul;
  return matmul;
}

}  // namespace zaya
