// bf16 products against f32, with bounds derived from bf16's 8-bit significand, and the model's forward
// and backward passes in bf16 against f32.
//
// bf16 keeps 8 significant bits, so rounding a value x gives x (1 + e) with |e| <= u = 2^-8. A term a b of
// a product then carries at most (2u + u^2) |a b| of input rounding, and f32 accumulation over k terms adds
// at most k 2^-24 sum |a b|: every bound below is a multiple of sum_k |a b|, element by element.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/bf16_matmul.h"
#include "backend/ops.h"
#include "core/rng.h"
#include "model/model_io.h"
#include "model/zaya_model.h"
#include "unit/reference_data.h"

namespace zaya {
namespace {

constexpr double kUnit = 1.0 / 256;  // u = 2^-8

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
};

void check_product(const ProductCase& p) {
  const bool ta = p.ta == Trans::Yes, tb = p.tb == Trans::Yes;
  const int64_t a_rows = ta ? p.k : p.m, a_cols = ta ? p.m : p.k;
  const int64_t b_rows = tb ? p.n : p.k, b_cols = tb ? p.k : p.n;
  const int64_t lda = a_cols + p.pad, ldb = b_cols + p.pad, ldc = p.n + p.pad;
  const std::vector<float> a = random_matrix(a_rows * lda, 1), b = random_matrix(b_rows * ldb, 2);
  const std::vector<float> c0 = random_matrix(p.m * ldc, 3);
  std::vector<float> c = c0;
  cpu_ops().gemm(Precision::BF16, p.ta, p.tb, p.m, p.n, p.k, p.alpha, a.data(), lda, b.data(), ldb, p.beta,
                 c.data(), ldc);
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
      const double accumulation = double(p.k + 2) * std::ldexp(1.0, -24) * scale;
      // Against the exact f32 product: input rounding plus accumulation.
      const double exact_bound = (2 * kUnit + kUnit * kUnit) * std::abs(p.alpha) * magnitude + accumulation;
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
      check_product({64, 48, 32, ta, tb, 1.0f, 0.0f, 0});   // no padding anywhere
      check_product({37, 20, 50, ta, tb, 1.0f, 1.0f, 3});   // m and k padded, accumulating, strided
      check_product({300, 17, 9, ta, tb, 0.5f, -2.0f, 0});  // m past the first buckets, scaled
      check_product({5, 33, 290, ta, tb, 1.0f, 0.0f, 1});   // a long sum padded to its bucket
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

TEST_F(Bf16, VaryingRowCountsCreateABoundedNumberOfPrimitives) {
  const int64_t n = 32, k = 48;
  const std::vector<float> a = random_matrix(700 * k, 6), b = random_matrix(k * n, 7);
  std::vector<float> c(size_t(700 * n));
  const int64_t before = cpu_bf16_matmul().primitives();
  std::vector<int64_t> buckets;
  for (int64_t m = 1; m <= 700; ++m) {
    cpu_ops().gemm(Precision::BF16, Trans::No, Trans::No, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                   c.data(), n);
    if (buckets.empty() || buckets.back() != bf16_bucket(m)) buckets.push_back(bf16_bucket(m));
  }
  EXPECT_LE(cpu_bf16_matmul().primitives() - before, int64_t(buckets.size()));
  EXPECT_LE(buckets.size(), 16u + 3 * 16u);  // 16 up to 256, then 16 per doubling
}

TEST(Bf16Bucket, PadsByAtMostASixteenthPastTheFirstBuckets) {
  for (int64_t size = 1; size <= 100000; ++size) {
    const int64_t bucket = bf16_bucket(size);
    ASSERT_GE(bucket, size);
    if (size > 256) {
      ASSERT_LE(double(bucket - size), double(size) / 16) << size;
    }
    ASSERT_EQ(bf16_bucket(bucket), bucket);
  }
}

struct PassResult {
  double loss = 0;
  std::vector<float> logits, grads;
  std::vector<int32_t> choices;
};

PassResult forward_backward(const ZayaConfig& config, Precision precision, int64_t batch, int64_t seq) {
  ParameterStore params(model_dims(config));
  init_parameters(params, config.initializer_range, 3);
  std::vector<int32_t> ids(size_t(batch * seq));
  const RandomStream rng(9, RngPurpose::Test, 0);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(rng.bits(i) % uint32_t(config.vocab_size));
  const std::vector<int32_t> labels = shifted_labels(ids.data(), batch, seq);
  ZayaModel model(params, cpu_ops(), precision);
  params.zero_grads();
  const ForwardResult r = model.forward_backward({ids.data(), labels.data(), nullptr, batch, seq},
                                                 1.0f / float(batch * (seq - 1)), true);
  PassResult out;
  out.loss = r.mean_loss();
  out.logits.assign(r.logits, r.logits + batch * seq * config.vocab_size);
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

}  // namespace
}  // namespace zaya
