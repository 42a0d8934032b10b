// bf16 products against f32, with bounds derived from bf16's 8-bit significand, and the model's forward
// and backward passes in bf16 against f32.
//
// bf16 keeps 8 significant bits, so rounding a value x gives x (1 + e) with |e| <= u = 2^-8. A term a b of
// a product then carries at most (2u + u^2) |a b| of input rounding, and f32 accumulation over k terms adds
// at most k 2^-24 sum |a b|: every bound below is a multiple of sum_k |a b|, element by element.

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/bf16_products.h"
#include "backend/ops.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/model_io.h"
#include "model/zaya_model.h"
#include "unit/counting_memory.h"
#include "unit/reference_data.h"

namespace zaya {
namespace {

constexpr double kUnit = 1.0 / 256;  // u = 2^-8
// The relative error of a product of two operands each rounded to bf16: (1 + u)^2 - 1.
constexpr double kProductRounding = 2 * kUnit + kUnit * kUnit;

// What summing `terms` f32 values of total magnitude `magnitude` can add: (terms + 2) 2^-24 of it.
double f32_accumulation(int64_t terms, double magnitude) {
  return double(terms + 2) * std::ldexp(1.0, -24) * magnitude;
}

std::vector<float> random_matrix(int64_t count, uint64_t stream) {
  const RandomStream rng(11, RngPurpose::Test, stream);
  std::vector<float> v(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) v[size_t(i)] = rng.normal(uint64_t(i));
  return v;
}

float round_bf16(float x) {
  return bf16_to_f32(f32_to_bf16(x));
}

struct ProductCase {
  int64_t m, n, k;
  Trans ta, tb;
  float alpha, beta;
  int64_t pad;  // extra elements per stored row (leading dimension > row length)
  // A and B handed over in bf16 (read in place) rather than f32 (rounded by the op).
  bool bf16_inputs = false;
};

void check_product(const ProductCase& p) {
  const bool ta = p.ta == Trans::Yes, tb = p.tb == Trans::Yes;
  const int64_t a_rows = ta ? p.k : p.m, a_cols = ta ? p.m : p.k;
  const int64_t b_rows = tb ? p.n : p.k, b_cols = tb ? p.k : p.n;
  const int64_t lda = a_cols + p.pad, ldb = b_cols + p.pad, ldc = p.n + p.pad;
  const std::vector<float> a = random_matrix(a_rows * lda, 1), b = random_matrix(b_rows * ldb, 2);
  const std::vector<float> c0 = random_matrix(p.m * ldc, 3);
  std::vector<float> c = c0;
  std::vector<BFloat16> a16(a.size()), b16(b.size());
  cpu_ops().convert_to_bf16(a.data(), int64_t(a.size()), a16.data());
  cpu_ops().convert_to_bf16(b.data(), int64_t(b.size()), b16.data());
  cpu_ops().gemm(Precision::BF16, p.ta, p.tb, p.m, p.n, p.k, p.alpha,
                 p.bf16_inputs ? Operand(a16.data()) : Operand(a.data()), lda,
                 p.bf16_inputs ? Operand(b16.data()) : Operand(b.data()), ldb, p.beta, c.data(), ldc);
  auto at = [&](int64_t i, int64_t l) { return ta ? a[size_t(l * lda + i)] : a[size_t(i * lda + l)]; };
  auto bt = [&](int64_t l, int64_t j) { return tb ? b[size_t(j * ldb + l)] : b[size_t(l * ldb + j)]; };
  double worst_exact = 0, worst_rounded = 0;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < p.n; ++j) {
      double exact = 0, rounded = 0, magnitude = 0;
      for (int64_t l = 0; l < p.k; ++l) {
        exact += double(at(i, l)) * bt(l, j);
        rounded += double(round_bf16(at(i, l))) * round_bf16(bt(l, j));
        magnitude += std::abs(double(at(i, l)) * bt(l, j));
      }
      const double before = c0[size_t(i * ldc + j)];
      const double got = c[size_t(i * ldc + j)];
      const double scale = std::abs(p.alpha) * magnitude + std::abs(p.beta * before);
      const double accumulation = f32_accumulation(p.k, scale);
      // Against the exact f32 product: input rounding plus accumulation.
      const double exact_bound = kProductRounding * std::abs(p.alpha) * magnitude + accumulation;
      worst_exact = std::max(worst_exact, std::abs(got - (p.alpha * exact + p.beta * before)) / exact_bound);
      // Against the product of the bf16-rounded inputs: accumulation alone (the op does round its inputs).
      worst_rounded = std::max(
          worst_rounded, std::abs(got - (p.alpha * rounded + p.beta * before)) / (accumulation + 1e-30));
    }
  }
  EXPECT_LE(worst_exact, 1.0) << p.m << "x" << p.n << "x" << p.k;
  EXPECT_LE(worst_rounded, 1.0) << p.m << "x" << p.n << "x" << p.k;
  for (int64_t i = 0; i < p.m; ++i) {  // the padding of each row is left alone
    for (int64_t j = p.n; j < ldc; ++j) EXPECT_EQ(c[size_t(i * ldc + j)], c0[size_t(i * ldc + j)]);
  }
}

class Bf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_ops().fast_bf16()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AMX";
  }
};

TEST_F(Bf16, ProductsStayWithinTheRoundingBound) {
  for (Trans ta : {Trans::No, Trans::Yes}) {
    for (Trans tb : {Trans::No, Trans::Yes}) {
      for (bool bf16_inputs : {false, true}) {
        // m and k of fixed sizes (a primitive of their own), or not (given at run time)
        check_product({64, 48, 32, ta, tb, 1.0f, 0.0f, 0, bf16_inputs});
        check_product({37, 20, 50, ta, tb, 1.0f, 1.0f, 3, bf16_inputs});   // accumulating, strided
        check_product({64, 20, 50, ta, tb, 1.0f, 1.0f, 2, bf16_inputs});   // k alone at run time
        check_product({37, 20, 64, ta, tb, 1.0f, 0.0f, 2, bf16_inputs});   // m alone at run time
        check_product({300, 17, 9, ta, tb, 0.5f, -2.0f, 0, bf16_inputs});  // m past 256, scaled
        check_product({5, 33, 290, ta, tb, 1.0f, 0.0f, 1, bf16_inputs});   // a long sum
      }
    }
  }
}

TEST_F(Bf16, Bf16OperandsGiveTheSameBitsAsRoundingInsideTheOp) {
  const int64_t m = 29, n = 40, k = 64;
  const std::vector<float> a = random_matrix(m * k, 4), b = random_matrix(n * k, 5);
  std::vector<BFloat16> b16(b.size());
  cpu_ops().convert_to_bf16(b.data(), int64_t(b.size()), b16.data());
  std::vector<float> from_f32(size_t(m * n)), from_bf16(size_t(m * n));
  cpu_ops().gemm(Precision::BF16, Trans::No, Trans::Yes, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f,
                 from_f32.data(), n);
  cpu_ops().gemm(Precision::BF16, Trans::No, Trans::Yes, m, n, k, 1.0f, a.data(), k, b16.data(), k, 0.0f,
                 from_bf16.data(), n);
  EXPECT_EQ(std::memcmp(from_f32.data(), from_bf16.data(), from_f32.size() * sizeof(float)), 0);
}

// Decoding's products, a few rows against bf16 weights [n, k], take their own path (the weights streamed
// once): the same bound against the bf16-rounded inputs, with A given in f32 or in bf16, strided, scaled and
// accumulating, k with a tail past the 32-lane chunks, for every row count (each up to 8 has its own kernel;
// 9 to 40 rows go in passes of 4) and n not a multiple of the weight rows summed at once (8, 8, 5, 4, 3, 2,
// 2, 2 for 1 to 8 rows, 4 past them); 41 rows go to oneDNN.
TEST_F(Bf16, FewRowsAgainstBf16WeightsStayWithinTheRoundingBound) {
  const int64_t n = 33, k = 1003, lda = k + 5, ldc = n + 2, most = 41;
  const std::vector<float> b = random_matrix(n * k, 8), c0 = random_matrix(most * ldc, 9);
  std::vector<BFloat16> b16(b.size());
  cpu_ops().convert_to_bf16(b.data(), int64_t(b.size()), b16.data());
  for (int64_t m = 1; m <= most; ++m) {
    for (bool a_in_bf16 : {false, true}) {
      const std::vector<float> a = random_matrix(m * lda, 10 + uint64_t(m));
      std::vector<BFloat16> a16(a.size());
      cpu_ops().convert_to_bf16(a.data(), int64_t(a.size()), a16.data());
      std::vector<float> c = c0;
      const float alpha = 0.5f, beta = m % 2 == 1 ? 1.0f : 0.0f;
      cpu_ops().gemm(Precision::BF16, Trans::No, Trans::Yes, m, n, k, alpha,
                     a_in_bf16 ? Operand(a16.data()) : Operand(a.data()), lda, b16.data(), k, beta, c.data(),
                     ldc);
      double worst = 0;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double rounded = 0, magnitude = 0;
          for (int64_t l = 0; l < k; ++l) {
            const double product =
                double(round_bf16(a[size_t(i * lda + l)])) * round_bf16(b[size_t(j * k + l)]);
            rounded += product;
            magnitude += std::abs(product);
          }
          const double before = c0[size_t(i * ldc + j)];
          const double bound = f32_accumulation(k, alpha * magnitude + std::abs(beta * before));
          worst =
              std::max(worst, std::abs(c[size_t(i * ldc + j)] - (alpha * rounded + beta * before)) / bound);
        }
        for (int64_t j = n; j < ldc; ++j) EXPECT_EQ(c[size_t(i * ldc + j)], c0[size_t(i * ldc + j)]);
      }
      EXPECT_LE(worst, 1.0) << m << " rows, A in " << (a_in_bf16 ? "bf16" : "f32");
    }
  }
}

TEST_F(Bf16, VaryingRowCountsCreateABoundedNumberOfPrimitives) {
  const int64_t n = 32, k = 48, most = 700;
  const std::vector<float> a = random_matrix(most * k, 6), b = random_matrix(k * n, 7);
  std::vector<float> c(size_t(most * n));
  // A stored [m, k] or transposed [k, m] inside a [k, most] buffer (its stride fixed, as an expert's rows
  // are inside a layer's).
  for (Trans ta : {Trans::No, Trans::Yes}) {
    const int64_t before = cpu_bf16_products().primitives();
    int64_t fixed_sizes = 0;
    for (int64_t m = 1; m <= most; ++m) {
      cpu_ops().gemm(Precision::BF16, ta, Trans::No, m, n, k, 1.0f, a.data(), ta == Trans::Yes ? most : k,
                     b.data(), n, 0.0f, c.data(), n);
      fixed_sizes += bf16_fixed_size(m);
    }
    // One primitive per fixed size, and one more that serves every other size.
    EXPECT_LE(cpu_bf16_products().primitives() - before, fixed_sizes + 1);
    EXPECT_LE(fixed_sizes, 16 + 3 * 16);  // 16 up to 256, then 16 per doubling
  }
}

// Whichever way this CPU rounds (AVX512-BF16 or the portable loop), each value gets core's f32_to_bf16 bits:
// every high half (so every exponent, sign, NaN and infinity) with low halves that round down, tie and round
// up, read from two starts so that runs of 16 hold denormals with zeros (from 0) and with normal values (from
// 3, the run across 0x00800000), and lengths that end inside a run.
TEST(Bf16Rounding, GivesTheScalarBitsForEveryKindOfValue) {
  const uint32_t low_halves[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  std::vector<float> values;
  for (uint32_t high = 0; high < 0x10000; ++high) {
    for (uint32_t low : low_halves) {
      const uint32_t bits = high << 16 | low;
      values.push_back(std::bit_cast<float>(bits));
    }
  }
  for (int64_t start : {0, 3}) {
    const int64_t all = int64_t(values.size()) - start;
    for (int64_t count : {all, all - 5, int64_t(13)}) {
      const float* from = values.data() + start;
      std::vector<BFloat16> rounded(static_cast<size_t>(count));
      round_to_bf16(from, count, rounded.data());
      for (int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(rounded[size_t(i)].bits, f32_to_bf16(from[i]))
            << std::hex << std::bit_cast<uint32_t>(from[i]) << std::dec << " (" << count << " from " << start
            << ")";
      }
    }
  }
}

TEST(Bf16FixedSize, SixteenPerDoublingPastTheFirst256) {
  int64_t up_to_256 = 0;
  for (int64_t size = 1; size <= 256; ++size) up_to_256 += bf16_fixed_size(size);
  EXPECT_EQ(up_to_256, 16);
  for (int64_t from = 256; from < 100000; from *= 2) {
    int64_t count = 0;
    for (int64_t size = from + 1; size <= 2 * from; ++size) count += bf16_fixed_size(size);
    EXPECT_EQ(count, 16) << "(" << from << ", " << 2 * from << "]";
  }
}

// Attention in bf16 against f32, element by element, on the same inputs. Bounds (first principles, no
// fitted factor): a score's inputs are rounded, so it moves by at most E_s = (2u + u^2) scale sum_d |q k|;
// a probability exp(s - lse) then moves by a factor within e^(+-2 E_s) in the forward (the log-sum-exp moves
// too) and e^(+-E_s) in the backward (which is given the log-sum-exp). A product term a b whose a carries an
// error ea before both factors are rounded is off by at most |b| ((|a| + ea)(1 + u)^2 - |a|). Both runs sum
// in f32: (terms + 2) 2^-23 of the magnitudes, and 2^-18 of them for exp and the row sums.
class Bf16Attention : public Bf16 {
 protected:
  // Groups of 3 query heads: blocks of 42 positions in f32, 32 in bf16 (96 rows, a fixed size of the bf16
  // products), the last one partial; D padded to 32.
  static constexpr int64_t B = 2, S = 150, H = 6, KV = 2, D = 24;
  static constexpr float kScale = 0.3f;
  std::vector<float> q = random_matrix(B * S * H * D, 21), k = random_matrix(B * S * KV * D, 22),
                     v = random_matrix(B * S * KV * D, 23), dout = random_matrix(B * S * H * D, 24);
  std::vector<float> mask = std::vector<float>(size_t(B * S), 1.0f);

  void SetUp() override {
    Bf16::SetUp();
    mask[size_t(S + 7)] = 0.0f;  // a padded key in the second sequence
  }
  float qv(int64_t b, int64_t i, int64_t h, int64_t d) const {
    return q[size_t(((b * S + i) * H + h) * D + d)];
  }
  float kv(const std::vector<float>& x, int64_t b, int64_t j, int64_t g, int64_t d) const {
    return x[size_t(((b * S + j) * KV + g) * D + d)];
  }
  float dov(int64_t b, int64_t i, int64_t h, int64_t d) const {
    return dout[size_t(((b * S + i) * H + h) * D + d)];
  }
  bool visible(int64_t b, int64_t i, int64_t j, int64_t window) const {
    return j <= i && (window == 0 || j > i - window) && mask[size_t(b * S + j)] != 0.0f;
  }
  static double term_error(double a, double ea, double b) {
    return std::abs(b) * ((std::abs(a) + ea) * (1 + kUnit) * (1 + kUnit) - std::abs(a));
  }
  static double f32_slack(int64_t terms, double magnitude) {
    return (double(terms + 2) * std::ldexp(1.0, -23) + std::ldexp(1.0, -18)) * magnitude;
  }
};

TEST_F(Bf16Attention, ForwardAndBackwardStayWithinTheRoundingBounds) {
  for (int64_t window : {0, 50}) {
    SCOPED_TRACE(testing::Message() << "window " << window);
    const AttentionShape shape{B, S, H, KV, D, window};
    std::vector<float> o(q.size()), lse(size_t(B * H * S)), o16(q.size()), lse16(lse.size());
    cpu_ops().attention_forward(Precision::F32, q.data(), k.data(), v.data(), mask.data(), shape, kScale,
                                o.data(), lse.data());
    cpu_ops().attention_forward(Precision::BF16, q.data(), k.data(), v.data(), mask.data(), shape, kScale,
                                o16.data(), lse16.data());
    // Both backward passes get the f32 forward's output and log-sum-exp: the op is checked on its inputs.
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), dq16(q.size()), dk16(k.size()),
        dv16(v.size());
    cpu_ops().attention_backward(Precision::F32, q.data(), k.data(), v.data(), mask.data(), o.data(),
                                 lse.data(), dout.data(), shape, kScale, dq.data(), dk.data(), dv.data());
    cpu_ops().attention_backward(Precision::BF16, q.data(), k.data(), v.data(), mask.data(), o.data(),
                                 lse.data(), dout.data(), shape, kScale, dq16.data(), dk16.data(),
                                 dv16.data());

    double worst = 0;
    auto check = [&](double got, double want, double bound) {
      worst = std::max(worst, std::abs(got - want) / bound);
    };
    std::vector<double> bound_dk(k.size()), bound_dv(v.size()), magnitude_dk(k.size()),
        magnitude_dv(v.size());
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / KV);
        for (int64_t i = 0; i < S; ++i) {
          // Exact scores, their error bounds, probabilities, dP and dS of this query row.
          std::vector<double> p(size_t(S), 0.0), es(size_t(S), 0.0), dp(size_t(S), 0.0), edp(size_t(S), 0.0);
          double max_es = 0, row_dot = 0;
          for (int64_t d = 0; d < D; ++d)
            row_dot += double(dov(b, i, h, d)) * o[size_t(((b * S + i) * H + h) * D + d)];
          const double row_lse = lse[size_t((b * H + h) * S + i)];
          for (int64_t j = 0; j < S; ++j) {
            if (!visible(b, i, j, window)) continue;
            double score = 0, score_magnitude = 0, dpj = 0, dp_magnitude = 0;
            for (int64_t d = 0; d < D; ++d) {
              score += double(qv(b, i, h, d)) * kv(k, b, j, g, d);
              score_magnitude += std::abs(double(qv(b, i, h, d)) * kv(k, b, j, g, d));
              dpj += double(dov(b, i, h, d)) * kv(v, b, j, g, d);
              dp_magnitude += std::abs(double(dov(b, i, h, d)) * kv(v, b, j, g, d));
            }
            p[size_t(j)] = std::exp(kScale * score - row_lse);
            es[size_t(j)] =
                kProductRounding * kScale * score_magnitude + f32_slack(D, kScale * score_magnitude);
            max_es = std::max(max_es, es[size_t(j)]);
            dp[size_t(j)] = dpj;
            edp[size_t(j)] = kProductRounding * dp_magnitude + f32_slack(D, dp_magnitude);
          }
          // Forward: o = sum_j p v with p off by a factor within e^(+-2 max E_s).
          const double forward_rho = std::exp(2 * max_es) - 1;
          for (int64_t d = 0; d < D; ++d) {
            double want = 0, bound = 0, magnitude = 0;
            for (int64_t j = 0; j < S; ++j) {
              want += p[size_t(j)] * kv(v, b, j, g, d);
              bound += term_error(p[size_t(j)], p[size_t(j)] * forward_rho, kv(v, b, j, g, d));
              magnitude += std::abs(p[size_t(j)] * kv(v, b, j, g, d));
            }
            const size_t at = size_t(((b * S + i) * H + h) * D + d);
            check(o16[at], o[at], bound + f32_slack(S, magnitude));
          }
          if (max_es > 0)
            check(lse16[size_t((b * H + h) * S + i)], row_lse, 2 * max_es + f32_slack(S, std::abs(row_lse)));
          // Backward: p off by a factor within e^(+-E_s); dS = p (dP - row_dot).
          for (int64_t d = 0; d < D; ++d) {
            double bound = 0, magnitude = 0;
            for (int64_t j = 0; j < S; ++j) {
              if (p[size_t(j)] == 0) continue;
              const double rho = std::exp(es[size_t(j)]) - 1, ds = p[size_t(j)] * (dp[size_t(j)] - row_dot);
              const double eds =
                  p[size_t(j)] * (rho * std::abs(dp[size_t(j)] - row_dot) + (1 + rho) * edp[size_t(j)]);
              bound += kScale * term_error(ds, eds, kv(k, b, j, g, d));
              magnitude += kScale * std::abs(ds * kv(k, b, j, g, d));
              const size_t at = size_t(((b * S + j) * KV + g) * D + d);
              bound_dk[at] += kScale * term_error(ds, eds, qv(b, i, h, d));
              magnitude_dk[at] += kScale * std::abs(ds * qv(b, i, h, d));
              bound_dv[at] += term_error(p[size_t(j)], p[size_t(j)] * rho, dov(b, i, h, d));
              magnitude_dv[at] += std::abs(p[size_t(j)] * dov(b, i, h, d));
            }
            const size_t at = size_t(((b * S + i) * H + h) * D + d);
            check(dq16[at], dq[at], bound + f32_slack(S, magnitude) + 1e-30);
          }
        }
      }
    }
    for (size_t at = 0; at < k.size(); ++at) {
      check(dk16[at], dk[at], bound_dk[at] + f32_slack(H / KV * S, magnitude_dk[at]) + 1e-30);
      check(dv16[at], dv[at], bound_dv[at] + f32_slack(H / KV * S, magnitude_dv[at]) + 1e-30);
    }
    EXPECT_LE(worst, 1.0);
    EXPECT_NE(o16, o) << "the bf16 pass rounds";
  }
}

// The convolution in bf16 against exact (double) sums over the same f32 inputs, element by element. The
// depthwise convolution is f32 in both precisions: its output dw is bit-identical. The grouped one rounds
// its inputs (dw, the taps, the output gradient): a sum of terms a b with magnitude M = sum |a b| moves by
// at most (2u + u^2) M, plus (terms + 2) 2^-24 M of f32 accumulation. The depthwise backward sums the
// grouped input gradient d_dw in f32, so each of its terms carries d_dw's bound times its other factor.
TEST_F(Bf16, ConvolutionStaysWithinTheRoundingBounds) {
  constexpr int64_t B = 2, S = 37, H = 4, KV = 2, D = 16, K0 = 3, K1 = 2;
  constexpr int64_t C = (H + KV) * D, pad = (K0 - 1) + (K1 - 1), L = S + K1 - 1;  // L: dw's positions
  const AttentionShape shape{B, S, H, KV, D, 0};
  const std::vector<float> x = random_matrix(B * S * C, 31), dw_weight = random_matrix(C * K0, 32),
                           dw_bias = random_matrix(C, 33), g_weight = random_matrix(C * D * K1, 34),
                           g_bias = random_matrix(C, 35), dout = random_matrix(B * S * C, 36);
  std::vector<float> scratch(size_t(cpu_ops().cca_conv_scratch(shape, K0, K1)));
  std::vector<float> dw(size_t(B * L * C)), dw16(dw.size()), out(size_t(B * S * C)), out16(out.size());
  cpu_ops().cca_conv_forward(Precision::F32, x.data(), shape, K0, K1, dw_weight.data(), dw_bias.data(),
                             g_weight.data(), g_bias.data(), dw.data(), out.data(), scratch.data());
  cpu_ops().cca_conv_forward(Precision::BF16, x.data(), shape, K0, K1, dw_weight.data(), dw_bias.data(),
                             g_weight.data(), g_bias.data(), dw16.data(), out16.data(), scratch.data());
  ASSERT_EQ(std::memcmp(dw.data(), dw16.data(), dw.size() * sizeof(float)), 0);
  std::vector<float> dx(x.size()), d_dw_weight(dw_weight.size()), d_dw_bias(static_cast<size_t>(C)),
      d_g_weight(g_weight.size()), d_g_bias(static_cast<size_t>(C));
  cpu_ops().cca_conv_backward(Precision::BF16, x.data(), dw.data(), dout.data(), shape, K0, K1,
                              dw_weight.data(), g_weight.data(), dx.data(), d_dw_weight.data(),
                              d_dw_bias.data(), d_g_weight.data(), d_g_bias.data(), scratch.data());

  // out[b, t, c] = bias + sum over taps a and inputs i of c's group of dw[b, t + a, i] tap(c, i, a).
  auto tap = [&](int64_t c, int64_t i, int64_t a) { return double(g_weight[size_t((c * D + i) * K1 + a)]); };
  double worst = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < S; ++t) {
      for (int64_t c = 0; c < C; ++c) {
        double exact = g_bias[size_t(c)], magnitude = 0;
        for (int64_t a = 0; a < K1; ++a) {
          for (int64_t i = 0; i < D; ++i) {
            const double term = dw[size_t((b * L + t + a) * C + c / D * D + i)] * tap(c, i, a);
            exact += term;
            magnitude += std::abs(term);
          }
        }
        const double bound =
            kProductRounding * magnitude + f32_accumulation(D * K1, magnitude + std::abs(g_bias[size_t(c)]));
        worst = std::max(worst, std::abs(out16[size_t((b * S + t) * C + c)] - exact) / bound);
      }
    }
  }
  EXPECT_LE(worst, 1.0) << "out";

  // d_dw[b, j, c] = sum over a, and outputs o of c's group, of dout[b, j - a, o] tap(o, c % D, a); and the
  // bound of each.
  std::vector<double> d_dw(size_t(B * L * C)), d_dw_bound(d_dw.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < L; ++j) {
      for (int64_t c = 0; c < C; ++c) {
        double sum = 0, magnitude = 0;
        for (int64_t a = 0; a < K1; ++a) {
          if (j - a < 0 || j - a >= S) continue;
          for (int64_t o = c / D * D; o < c / D * D + D; ++o) {
            const double term = dout[size_t((b * S + j - a) * C + o)] * tap(o, c % D, a);
            sum += term;
            magnitude += std::abs(term);
          }
        }
        d_dw[size_t((b * L + j) * C + c)] = sum;
        d_dw_bound[size_t((b * L + j) * C + c)] =
            kProductRounding * magnitude + f32_accumulation(D * K1, magnitude);
      }
    }
  }
  // Sums of d_dw times another f32 factor: each term off by |factor| times d_dw's bound.
  struct Sum {
    double exact = 0, bound = 0, magnitude = 0;
    int64_t terms = 0;
    void add(double factor, size_t at, const std::vector<double>& values, const std::vector<double>& bounds) {
      exact += factor * values[at];
      bound += std::abs(factor) * bounds[at];
      magnitude += std::abs(factor * values[at]);
      ++terms;
    }
    double error_bound() const { return bound + f32_accumulation(terms, magnitude); }
  };
  worst = 0;
  for (int64_t b = 0; b < B; ++b) {  // dx[b, s, c] = sum over a of w[c, a] d_dw[b, s + pad - a, c]
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t c = 0; c < C; ++c) {
        Sum sum;
        for (int64_t a = 0; a < K0; ++a) {
          const int64_t j = s + pad - a;
          if (j >= 0 && j < L)
            sum.add(dw_weight[size_t(c * K0 + a)], size_t((b * L + j) * C + c), d_dw, d_dw_bound);
        }
        worst = std::max(worst, std::abs(dx[size_t((b * S + s) * C + c)] - sum.exact) / sum.error_bound());
      }
    }
  }
  EXPECT_LE(worst, 1.0) << "dx";
  double worst_weight = 0, worst_bias = 0;
  // Over every (b, j): d_dw x[b, j + a - pad] for the weight, d_dw for the bias.
  for (int64_t c = 0; c < C; ++c) {
    Sum bias;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < L; ++j) bias.add(1.0, size_t((b * L + j) * C + c), d_dw, d_dw_bound);
    }
    worst_bias = std::max(worst_bias, std::abs(d_dw_bias[size_t(c)] - bias.exact) / bias.error_bound());
    for (int64_t a = 0; a < K0; ++a) {
      Sum weight;
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t j = 0; j < L; ++j) {
          const int64_t s = j + a - pad;
          if (s >= 0 && s < S)
            weight.add(x[size_t((b * S + s) * C + c)], size_t((b * L + j) * C + c), d_dw, d_dw_bound);
        }
      }
      worst_weight = std::max(
          worst_weight, std::abs(d_dw_weight[size_t(c * K0 + a)] - weight.exact) / weight.error_bound());
    }
  }
  EXPECT_LE(worst_weight, 1.0) << "d_dw_weight";
  EXPECT_LE(worst_bias, 1.0) << "d_dw_bias";

  // d_g_weight[c, i, a] = sum over (b, t) of dout[b, t, c] dw[b, t + a, i of c's group]: rounded inputs.
  worst = 0;
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t i = 0; i < D; ++i) {
      for (int64_t a = 0; a < K1; ++a) {
        double exact = 0, magnitude = 0;
        for (int64_t b = 0; b < B; ++b) {
          for (int64_t t = 0; t < S; ++t) {
            const double term =
                double(dout[size_t((b * S + t) * C + c)]) * dw[size_t((b * L + t + a) * C + c / D * D + i)];
            exact += term;
            magnitude += std::abs(term);
          }
        }
        const double bound = kProductRounding * magnitude + f32_accumulation(B * S, magnitude);
        worst = std::max(worst, std::abs(d_g_weight[size_t((c * D + i) * K1 + a)] - exact) / bound);
      }
    }
  }
  EXPECT_LE(worst, 1.0) << "d_g_weight";
}

struct PassResult {
  double loss = 0;
  std::vector<float> logits, grads;
  std::vector<int32_t> choices;
};

PassResult forward_backward(const ZayaConfig& config, Precision precision, int64_t batch, int64_t seq,
                            bool keep_logits = true) {
  ParameterStore params(model_dims(config));
  init_parameters(params, config.initializer_range, 3);
  std::vector<int32_t> ids(size_t(batch * seq));
  const RandomStream rng(9, RngPurpose::Test, 0);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(rng.bits(i) % uint32_t(config.vocab_size));
  const std::vector<int32_t> labels = shifted_labels(ids.data(), batch, seq);
  ZayaModel model(params, cpu_ops(), precision);
  params.zero_grads();
  const ForwardResult r = model.forward_backward({ids.data(), labels.data(), nullptr, batch, seq},
                                                 1.0f / float(batch * (seq - 1)), keep_logits);
  PassResult out;
  out.loss = r.mean_loss();
  if (keep_logits) out.logits.assign(r.logits, r.logits + batch * seq * config.vocab_size);
  out.grads.assign(params.grads(), params.grads() + params.table().total_floats());
  out.choices.assign(r.expert_choice, r.expert_choice + config.num_hidden_layers * batch * seq);
  return out;
}

TEST_F(Bf16, ModelPassesStayCloseToFloat32) {
  ZayaConfig config =
      preset_config("small");  // hidden 128, 4 layers, 8 experts: products of 128 to 4096 terms
  const int64_t batch = 2, seq = 64;
  const PassResult f32 = forward_backward(config, Precision::F32, batch, seq);
  const PassResult b16 = forward_backward(config, Precision::BF16, batch, seq);
  const PassResult again = forward_backward(config, Precision::BF16, batch, seq);
  // A bf16 pass is as deterministic as an f32 one.
  EXPECT_EQ(b16.grads, again.grads);
  EXPECT_EQ(b16.logits, again.logits);

  // Each product rounds its inputs once (<= 2u relative per term, about u sqrt(2) in L2 for independent
  // errors), and an error passes through some 2 products per layer on each of 4 layers: the logits
  // stay within 8u, the loss within 1u relative.
  EXPECT_LE(test::relative_error(b16.logits, f32.logits), 8 * kUnit);
  EXPECT_NEAR(b16.loss, f32.loss, kUnit * f32.loss);
  // Gradients go through the forward's rounding and the backward's: the whole gradient within 16u. (A token
  // whose router choice differs between the two moves one expert's rows, so single tensors can differ more.)
  EXPECT_LE(test::relative_error(b16.grads, f32.grads), 16 * kUnit);
  int64_t same = 0;
  for (size_t i = 0; i < f32.choices.size(); ++i) same += f32.choices[i] == b16.choices[i];
  EXPECT_GE(double(same), 0.97 * double(f32.choices.size())) << "router choices";
}

// A bf16 step adds the head's weight gradient in groups of chunks of tokens (ZayaModel::head): on the CPU's
// chunks of up to 2^24 logits, 1200 tokens of a 65536 vocabulary make 5 chunks of 240, in a group of 4 and a
// group of 1. Every token's share must land once: the head's gradient stays as close to float32's as the
// whole model's does (16u, above), where a group lost or added twice would move it by a fifth or more.
TEST_F(Bf16, HeadGradientTakesEveryChunkOnce) {
  ZayaConfig config = preset_config("small");
  config.vocab_size = 65536;
  config.tie_word_embeddings = false;
  const int64_t batch = 2, seq = 600;
  const PassResult f32 = forward_backward(config, Precision::F32, batch, seq, false);
  const PassResult b16 = forward_backward(config, Precision::BF16, batch, seq, false);
  const ParameterStore params(model_dims(config));
  const ParamInfo& head = params.table().at("lm_head.weight");
  auto slice = [&](const PassResult& pass) {
    return std::vector<float>(pass.grads.begin() + head.offset,
                              pass.grads.begin() + head.offset + head.numel());
  };
  EXPECT_LE(test::relative_error(slice(b16), slice(f32)), 16 * kUnit);
}

// zaya serve --precision bf16: a prefill and then token-by-token decoding read the bf16 weight copies (the
// few-row products), and stay as close to the float32 pass as a bf16 pass does (8u, as above).
TEST_F(Bf16, DecodingStaysCloseToFloat32) {
  ParameterStore params(model_dims(preset_config("small")));
  init_parameters(params, 0.5, 3);
  const int64_t seq = 24, prompt = 8, vocab = params.dims().vocab;
  std::vector<int32_t> ids(seq);
  for (int64_t i = 0; i < seq; ++i) ids[size_t(i)] = int32_t((i * 37 + 11) % vocab);
  ZayaModel f32(params, cpu_ops(), Precision::F32);
  const ForwardResult full = f32.forward({ids.data(), nullptr, nullptr, 1, seq}, true);
  const std::vector<float> want(full.logits, full.logits + seq * vocab);
  ZayaModel b16(params, cpu_ops(), Precision::BF16);
  DecodeCache cache = make_decode_cache(params.dims(), seq);
  const float* prefilled = b16.prefill(ids.data(), prompt, cache);
  std::vector<float> got(prefilled, prefilled + prompt * vocab);
  for (int64_t t = prompt; t < seq; ++t) {
    const float* logits = b16.decode_step(ids[size_t(t)], cache);
    got.insert(got.end(), logits, logits + vocab);
  }
  EXPECT_LE(test::relative_error(got, want), 8 * kUnit);
}

TEST_F(Bf16, WeightsChangedRefreshesTheCopies) {
  const ZayaConfig config = preset_config("tiny");
  ParameterStore params(model_dims(config));
  init_parameters(params, config.initializer_range, 4);
  std::vector<int32_t> ids = {5, 9, 3, 7, 1, 2, 8, 4};
  const Batch batch{ids.data(), nullptr, nullptr, 1, 8};
  ZayaModel model(params, cpu_ops(), Precision::BF16);
  const ForwardResult first = model.forward(batch, true);
  const std::vector<float> before(first.logits, first.logits + 8 * config.vocab_size);
  const ParamInfo& o_proj = params.table().at("model.layers.0.self_attn.o_proj.weight");
  for (int64_t i = 0; i < o_proj.numel(); ++i) params.value(o_proj)[i] *= 2.0f;
  const ForwardResult stale = model.forward(batch, true);
  EXPECT_EQ(std::vector<float>(stale.logits, stale.logits + 8 * config.vocab_size), before)
      << "the products read the copies, not the f32 values";
  model.weights_changed();
  const ForwardResult fresh = model.forward(batch, true);
  EXPECT_NE(std::vector<float>(fresh.logits, fresh.logits + 8 * config.vocab_size), before);
}

// A copy of `from` (f32 values) in a store that holds its expert weights in bf16 only, as zaya serve loads a
// model to run in bf16: the expert weights rounded to nearest even, in `memory`.
std::unique_ptr<ParameterStore> with_bf16_experts(const ParameterStore& from, MemoryResource& memory) {
  auto store = std::make_unique<ParameterStore>(from.dims(), from.table(), memory, ExpertValues::Bf16);
  for (const ParamInfo& param : from.table().params())
    store->write_value(param, from.read_value(param).data());
  return store;
}

// The products of a model over bf16 experts read the same bf16 values that a model over f32 experts rounds
// for itself: every pass gives the same bits, the prefills and batched decoding of serving among them. The
// store holds 4 bytes for each other parameter and 2 for each expert weight, where an f32 store holds 4 (and
// its model 2 more for the bf16 copy).
TEST_F(Bf16, ExpertsHeldOnlyInBf16GiveTheSameBits) {
  const ModelDims dims = model_dims(preset_config("small"));
  ParameterStore f32_experts(dims);
  init_parameters(f32_experts, 0.5, 5);
  CountingMemory memory;
  const std::unique_ptr<ParameterStore> bf16_experts = with_bf16_experts(f32_experts, memory);
  const ParameterTable& table = f32_experts.table();
  const int64_t dense = table.dense_floats(), experts = table.total_floats() - dense;
  EXPECT_EQ(memory.live_bytes, size_t(dense) * sizeof(float) + size_t(experts) * sizeof(BFloat16));

  ZayaModel a(f32_experts, cpu_ops(), Precision::BF16), b(*bf16_experts, cpu_ops(), Precision::BF16);
  const int64_t V = dims.vocab, S = 16;
  std::vector<int32_t> ids(size_t(2 * S));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 53 + 7) % size_t(V));
  const Batch batch{ids.data(), nullptr, nullptr, 2, S};
  const ForwardResult full_a = a.forward(batch, true);
  const std::vector<float> logits_a(full_a.logits, full_a.logits + 2 * S * V);
  const ForwardResult full_b = b.forward(batch, true);
  EXPECT_EQ(std::vector<float>(full_b.logits, full_b.logits + 2 * S * V), logits_a);

  // Two prompts of 5 and 9 tokens prefilled together, then decoded together to the end.
  const int64_t lengths[] = {5, 9};
  const int32_t* prompts[] = {ids.data(), ids.data() + S};
  std::vector<float> served[2];
  for (ZayaModel* model : {&a, &b}) {
    std::vector<float>& out = served[model == &b];
    DecodeCache caches[] = {make_decode_cache(dims, S), make_decode_cache(dims, S)};
    DecodeCache* cache_ptrs[] = {&caches[0], &caches[1]};
    const float* last = model->prefill(prompts, lengths, cache_ptrs, 2, ZayaModel::PrefillLogits::Last);
    out.assign(last, last + 2 * V);
    for (int64_t step = 0; step < S - lengths[1]; ++step) {
      const int32_t tokens[] = {prompts[0][lengths[0] + step], prompts[1][lengths[1] + step]};
      const float* logits = model->decode_batch(tokens, cache_ptrs, 2);
      out.insert(out.end(), logits, logits + 2 * V);
    }
  }
  EXPECT_EQ(served[1], served[0]);
}

// Such a store serves only a forward pass in bf16: what needs the f32 values of the expert weights is an
// Error that says so, not a read of memory it does not hold. Reading through the host gives their bf16
// values.
TEST_F(Bf16, ExpertsHeldOnlyInBf16RefuseWhatNeedsTheirF32Values) {
  const ZayaConfig config = preset_config("tiny");
  const ModelDims dims = model_dims(config);
  ParameterStore f32_experts(dims);
  init_parameters(f32_experts, 0.5, 6);
  const std::unique_ptr<ParameterStore> store = with_bf16_experts(f32_experts, host_memory());
  const ParamInfo& gate_up = store->table().at("model.layers.0.mlp.experts.gate_up_proj");
  const ParamInfo& q_proj = store->table().at("model.layers.0.self_attn.qkv_proj.q_proj.weight");
  EXPECT_THROW(store->value(gate_up), Error);
  EXPECT_THROW(store->value_view(gate_up), Error);
  EXPECT_THROW(store->grads(), Error);
  EXPECT_EQ(store->read_value(q_proj), f32_experts.read_value(q_proj));
  const std::vector<float> exact = f32_experts.read_value(gate_up), held = store->read_value(gate_up);
  ASSERT_EQ(held.size(), exact.size());
  for (size_t i = 0; i < held.size(); ++i) ASSERT_EQ(held[i], round_bf16(exact[i])) << i;

  EXPECT_THROW(ZayaModel(*store, cpu_ops(), Precision::F32), Error);
  ZayaModel model(*store, cpu_ops(), Precision::BF16);
  std::vector<int32_t> ids = {5, 9, 3, 7, 1, 2, 8, 4};
  const std::vector<int32_t> labels = shifted_labels(ids.data(), 1, 8);
  EXPECT_THROW(model.forward_backward({ids.data(), labels.data(), nullptr, 1, 8}, 1.0f / 7), Error);
}

}  // namespace
}  // namespace zaya
