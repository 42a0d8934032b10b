// A run's bits do not depend on the thread count: every product and every op of the CPU backend, a model's
// training pass and its decoding give the same bits on 1, 2 and 3 threads (3 on a 2-core machine too: the
// count, not the cores, is what a split could follow).

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/product_pieces.h"
#include "backend/op_check.h"
#include "backend/ops.h"
#include "core/rng.h"
#include "core/threads.h"
#include "infer/generator.h"
#include "model/model_dims.h"
#include "model/model_io.h"
#include "model/zaya_model.h"

namespace zaya {
namespace {

constexpr int kThreadCounts[] = {1, 2, 3};

std::vector<float> random_values(int64_t count, uint64_t stream) {
  const RandomStream rng(17, RngPurpose::Test, stream);
  std::vector<float> v(size_t(count > 0 ? count : 0));
  for (int64_t i = 0; i < count; ++i) v[size_t(i)] = rng.normal(uint64_t(i));
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---- the plan ------------------------------------------------------------------------------------------

TEST(ProductPieces, TileTheOutputAndTheSumExactlyOnce) {
  const int64_t sizes[] = {1, 7, 41, 64, 73, 130, 257, 500, 1024, 2048, 4096, 32768};
  const int64_t depths[] = {1, 33, 128, 1000, 4096, 65536};
  for (int64_t m : sizes) {
    for (int64_t n : sizes) {
      for (int64_t k : depths) {
        const ProductPieces p = plan_product_pieces(m, n, k);
        const std::string shape = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
        ASSERT_GE(p.count(), 1) << shape;
        EXPECT_LE(p.count(), 64) << shape;
        // The pieces' extents, times their counts, cover each size with less than one piece to spare.
        EXPECT_GE(p.tile_rows * p.row_tiles, m) << shape;
        EXPECT_LT(p.tile_rows * (p.row_tiles - 1), m) << shape;
        EXPECT_GE(p.tile_cols * p.col_tiles, n) << shape;
        EXPECT_LT(p.tile_cols * (p.col_tiles - 1), n) << shape;
        EXPECT_GE(p.chunk_depth * p.depth_chunks, k) << shape;
        EXPECT_LT(p.chunk_depth * (p.depth_chunks - 1), k) << shape;
        const double macs = double(m) * double(n) * double(k);
        if (macs < double(1 << 21)) {
          EXPECT_EQ(p.count(), 1) << shape << ": too small to share";
        }
        // The sum is cut only where the output's tiles cannot be halved into tiles of at least 128.
        const bool narrow_tiles = p.tile_rows <= 256 && p.tile_cols <= 256;
        if (p.depth_chunks > 1) {
          EXPECT_TRUE(narrow_tiles) << shape;
        }
        // A product worth sharing is cut into at least 4 pieces, unless nothing of it can be cut further.
        if (macs >= double(1 << 23) && p.count() < 4) {
          EXPECT_TRUE(narrow_tiles && p.chunk_depth <= 1024) << shape;
        }
      }
    }
  }
}

// ---- products ------------------------------------------------------------------------------------------

struct ProductCase {
  int64_t m, n, k;
  Trans ta, tb;
  float alpha, beta;
  int64_t pad;  // extra elements per stored row
};

// C of one product of random operands (bf16 ones rounded first where `bf16_operands`), C starting from its
// own random values.
std::vector<float> product(const ProductCase& p, Precision precision, bool bf16_operands) {
  const bool ta = p.ta == Trans::Yes, tb = p.tb == Trans::Yes;
  const int64_t lda = (ta ? p.m : p.k) + p.pad, ldb = (tb ? p.k : p.n) + p.pad, ldc = p.n + p.pad;
  const std::vector<float> a = random_values((ta ? p.k : p.m) * lda, 1),
                           b = random_values((tb ? p.n : p.k) * ldb, 2);
  std::vector<float> c = random_values(p.m * ldc, 3);
  std::vector<BFloat16> a16(a.size()), b16(b.size());
  cpu_ops().convert_to_bf16(a.data(), int64_t(a.size()), a16.data());
  cpu_ops().convert_to_bf16(b.data(), int64_t(b.size()), b16.data());
  cpu_ops().gemm(precision, p.ta, p.tb, p.m, p.n, p.k, p.alpha,
                 bf16_operands ? Operand(a16.data()) : Operand(a.data()), lda,
                 bf16_operands ? Operand(b16.data()) : Operand(b.data()), ldb, p.beta, c.data(), ldc);
  return c;
}

// Shapes of every path: an expert's odd row counts (through the few-row kernel up to 40 rows against a bf16
// weight, and through oneDNN), tiles of the output, sums cut into chunks (a small output over a deep sum),
// transposed and padded operands, scaled and accumulating.
std::vector<ProductCase> product_cases() {
  std::vector<ProductCase> cases;
  for (Trans ta : {Trans::No, Trans::Yes}) {
    for (Trans tb : {Trans::No, Trans::Yes}) {
      cases.push_back({7, 512, 256, ta, tb, 1.0f, 0.0f, 0});
      cases.push_back({41, 1024, 300, ta, tb, 0.5f, 1.0f, 3});
      cases.push_back({130, 2048, 1024, ta, tb, 1.0f, 0.0f, 0});
      cases.push_back({1024, 1024, 130, ta, tb, 1.0f, 1.0f, 0});
      cases.push_back({513, 700, 257, ta, tb, -2.0f, 0.5f, 1});
      cases.push_back({64, 64, 8192, ta, tb, 1.0f, 1.0f, 0});
      cases.push_back({8, 24, 65536, ta, tb, 1.0f, 0.0f, 2});
    }
  }
  return cases;
}

class ProductThreads : public ::testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    if (GetParam() == Precision::BF16 && !cpu_ops().fast_bf16())
      GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX";
  }
};

TEST_P(ProductThreads, GiveTheSameBitsOnAnyThreadCountAndInsideAParallelRegion) {
  const Precision precision = GetParam();
  for (const ProductCase& p : product_cases()) {
    for (bool bf16_operands : {false, true}) {
      if (bf16_operands && precision == Precision::F32) continue;
      const std::string name = std::to_string(p.m) + "x" + std::to_string(p.n) + "x" + std::to_string(p.k) +
                               (p.ta == Trans::Yes ? " A^T" : "") + (p.tb == Trans::Yes ? " B^T" : "");
      std::vector<float> first;
      for (int threads : kThreadCounts) {
        const ThreadCountScope scope(threads);
        const std::vector<float> c = product(p, precision, bf16_operands);
        if (first.empty()) first = c;
        EXPECT_TRUE(same_bits(c, first)) << name << " on " << threads << " threads";
      }
      // A kernel's own parallel loop calls products from inside a region: its pieces then run in turn.
      std::vector<float> nested;
      const ThreadCountScope scope(2);
#pragma omp parallel
#pragma omp single
      nested = product(p, precision, bf16_operands);
      EXPECT_TRUE(same_bits(nested, first)) << name << " inside a parallel region";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, ProductThreads, ::testing::Values(Precision::F32, Precision::BF16),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

// A product whose sum is cut into chunks still is the product: against double sums within f32's accumulation
// bound, and with beta 0 reading nothing of C (here NaN), as BLAS.
TEST(ProductPieces, ChunkedSumsAreTheProduct) {
  const int64_t m = 24, n = 40, k = 20000;
  ASSERT_GT(plan_product_pieces(m, n, k).depth_chunks, 1);
  const std::vector<float> a = random_values(k * m, 4), b = random_values(k * n, 5);  // A^T [k, m], B [k, n]
  for (float beta : {0.0f, 1.0f}) {
    std::vector<float> c0 = random_values(m * n, 6);
    if (beta == 0) c0.assign(c0.size(), std::numeric_limits<float>::quiet_NaN());
    std::vector<float> c = c0;
    const float alpha = 0.75f;
    cpu_ops().gemm(Trans::Yes, Trans::No, m, n, k, alpha, a.data(), m, b.data(), n, beta, c.data(), n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, magnitude = 0;
        for (int64_t l = 0; l < k; ++l) {
          sum += double(a[size_t(l * m + i)]) * b[size_t(l * n + j)];
          magnitude += std::abs(double(a[size_t(l * m + i)]) * b[size_t(l * n + j)]);
        }
        const double before = beta == 0 ? 0.0 : double(c0[size_t(i * n + j)]);
        const double want = alpha * sum + beta * before;
        const double bound = double(k + 4) * std::ldexp(1.0, -24) * (alpha * magnitude + std::abs(before));
        ASSERT_LE(std::abs(c[size_t(i * n + j)] - want), bound) << i << ", " << j << " beta " << beta;
      }
    }
  }
}

// ---- every op ------------------------------------------------------------------------------------------

// Every op of the table on the CPU against itself at another thread count, at the small preset's shapes with
// 4 sequences of 160 tokens (a sliding window of 64 cutting in): its products are large enough to be cut into
// pieces. Every output of every op must have the same bits.
class OpThreads : public ::testing::TestWithParam<Precision> {
 protected:
  void SetUp() override {
    if (GetParam() == Precision::BF16 && !cpu_ops().fast_bf16())
      GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX";
  }
};

TEST_P(OpThreads, EveryOpGivesTheSameBitsOnOneTwoAndThreeThreads) {
  ZayaConfig config = preset_config("small");
  config.sliding_window = 64;
  config.layer_types[1] = std::string(kLayerSliding);
  const OpCheckShape shape = op_check_shape(model_dims(config), 4, 160);
  for (int threads : {2, 3}) {
    OpCheckOptions options;
    options.precision = GetParam();
    options.repeats = 0;
    options.reference_threads = 1;
    options.device_threads = threads;
    for (const OpCheckResult& r : check_ops(shape, cpu_ops(), cpu_ops(), options)) {
      EXPECT_EQ(r.abs_error, 0.0) << r.op << " (" << r.call << "), " << r.worst_output << ", 1 against "
                                  << threads << " threads";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, OpThreads, ::testing::Values(Precision::F32, Precision::BF16),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

// ---- a model -------------------------------------------------------------------------------------------

// The small preset at initialisation: a training pass's loss and gradients, and the logits of a prefill of a
// long prompt and of decoding after it (caches long enough to be cut into ranges), on each thread count.
TEST(ModelThreads, TrainingAndDecodingGiveTheSameBitsOnAnyThreadCount) {
  const ZayaConfig config = preset_config("small");
  ParameterStore params(model_dims(config));
  init_parameters(params, 0.02, 3);
  const int64_t B = 4, S = 256, V = config.vocab_size;
  std::vector<int32_t> ids(size_t(B * S));
  const RandomStream rng(9, RngPurpose::Test, 0);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(rng.bits(i) % uint32_t(V));
  const std::vector<int32_t> labels = shifted_labels(ids.data(), B, S);
  for (Precision precision : {Precision::F32, Precision::BF16}) {
    if (precision == Precision::BF16 && !cpu_ops().fast_bf16()) continue;
    std::vector<float> first_grads, first_logits;
    double first_loss = 0;
    for (int threads : kThreadCounts) {
      const ThreadCountScope scope(threads);
      ZayaModel model(params, cpu_ops(), precision);
      params.zero_grads();
      const ForwardResult result = model.forward_backward({ids.data(), labels.data(), nullptr, B, S}, 1e-3f);
      const std::vector<float> grads(params.grads(), params.grads() + params.table().total_floats());
      // A prompt of 700 tokens (3 ranges of keys), then 3 tokens decoded one at a time.
      DecodeCache cache = make_decode_cache(model_dims(config), 704);
      const float* logits = model.prefill(ids.data(), 700, cache, ZayaModel::PrefillLogits::Last);
      std::vector<float> all(logits, logits + V);
      for (int64_t t = 0; t < 3; ++t) {
        logits = model.decode_step(ids[size_t(700 + t)], cache);
        all.insert(all.end(), logits, logits + V);
      }
      if (first_grads.empty()) {
        first_grads = grads;
        first_logits = all;
        first_loss = result.loss_sum;
      }
      const std::string name(precision_name(precision));
      EXPECT_EQ(result.loss_sum, first_loss) << name << ", " << threads << " threads";
      EXPECT_TRUE(same_bits(grads, first_grads)) << name << ", " << threads << " threads";
      EXPECT_TRUE(same_bits(all, first_logits)) << name << ", " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace zaya
