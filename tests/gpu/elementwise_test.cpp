// The GPU backend's products, elementwise ops, norms and residual scaling against the CPU backend.
// Tolerances: f32 results differ from the CPU's only by the order of their sums, so the bound is a few
// f32 ulps of the terms summed (1e-5 relative for rows of a few hundred values); bf16 products read the same
// bf16-rounded operands on both sides and sum in f32, so they agree to f32 sum-order error too.

#include <cstring>
#include <limits>
#include <utility>

#include "core/dtype.h"
#include "gpu/gpu_test_util.h"

namespace zaya::test {
namespace {

using Elementwise = GpuOpsTest;

struct ProductCase {
  Trans trans_a, trans_b;
  Precision precision;
  bool bf16_weight;  // B is a bf16 copy (as the model's weights are)
};

void PrintTo(const ProductCase& c, std::ostream* os) {
  *os << (c.trans_a == Trans::Yes ? "A^T " : "A ") << (c.trans_b == Trans::Yes ? "B^T " : "B ")
      << (c.precision == Precision::BF16 ? "bf16" : "f32") << (c.bf16_weight ? ", B in bf16" : "");
}

class GpuProducts : public GpuOpsTest, public testing::WithParamInterface<ProductCase> {};

TEST_P(GpuProducts, MatchTheCpu) {
  const ProductCase c = GetParam();
  const int64_t m = 37, n = 53, k = 70;
  // Leading dimensions larger than the rows, as the model's slices of wider matrices have.
  const int64_t lda = (c.trans_a == Trans::Yes ? m : k) + 3, ldb = (c.trans_b == Trans::Yes ? k : n) + 5,
                ldc = n + 2;
  const auto a = random_values(size_t((c.trans_a == Trans::Yes ? k : m) * lda), 1);
  const auto b = random_values(size_t((c.trans_b == Trans::Yes ? n : k) * ldb), 2);
  std::vector<float> expected = random_values(size_t(m * ldc), 3);
  DeviceArray<float> ga(a), gb(b), gc(expected);
  std::vector<BFloat16> b16(b.size());
  for (size_t i = 0; i < b.size(); ++i) b16[i].bits = f32_to_bf16(b[i]);
  DeviceArray<BFloat16> gb16(b16);

  const Operand cpu_b = c.bf16_weight ? Operand(b16.data()) : Operand(b.data());
  const Operand gpu_b = c.bf16_weight ? Operand(gb16.data()) : Operand(gb.data());
  cpu().gemm(c.precision, c.trans_a, c.trans_b, m, n, k, 0.75f, a.data(), lda, cpu_b, ldb, 0.5f,
             expected.data(), ldc);
  gpu().gemm(c.precision, c.trans_a, c.trans_b, m, n, k, 0.75f, ga.data(), lda, gpu_b, ldb, 0.5f, gc.data(),
             ldc);
  EXPECT_TRUE(close(gc.host(), expected, 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(GpuOps, GpuProducts,
                         testing::Values(ProductCase{Trans::No, Trans::No, Precision::F32, false},
                                         ProductCase{Trans::No, Trans::Yes, Precision::F32, false},
                                         ProductCase{Trans::Yes, Trans::No, Precision::F32, false},
                                         ProductCase{Trans::Yes, Trans::Yes, Precision::F32, false},
                                         ProductCase{Trans::No, Trans::Yes, Precision::BF16, true},
                                         ProductCase{Trans::Yes, Trans::No, Precision::BF16, false},
                                         ProductCase{Trans::No, Trans::No, Precision::BF16, true}));

// k = 0, the weight gradient of an expert that received no tokens: op(A) op(B) is an empty sum, so C becomes
// beta C; with beta 0, zeros even where C held NaN (a fresh allocation does in the emulator). Both
// precisions, both transposes of A (a [0, m] operand), and an operand pointer that points at nothing.
TEST_F(Elementwise, EmptyProductsScaleTheirOutput) {
  const int64_t m = 5, n = 7, ldc = 9;
  for (const Precision precision : {Precision::F32, Precision::BF16}) {
    for (const Trans trans_a : {Trans::No, Trans::Yes}) {
      std::vector<float> c = random_values(size_t(m * ldc), 8);
      c[3] = std::numeric_limits<float>::quiet_NaN();
      DeviceArray<float> scaled(c), zeroed(c);
      const float* nothing = nullptr;
      gpu().gemm(precision, trans_a, Trans::Yes, m, n, 0, 1.0f, nothing, trans_a == Trans::Yes ? m : 1,
                 nothing, 1, 0.5f, scaled.data(), ldc);
      gpu().gemm(precision, trans_a, Trans::Yes, m, n, 0, 1.0f, nothing, trans_a == Trans::Yes ? m : 1,
                 nothing, 1, 0.0f, zeroed.data(), ldc);
      std::vector<float> half = c, zeros = c;
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          half[size_t(i * ldc + j)] *= 0.5f;
          zeros[size_t(i * ldc + j)] = 0.0f;
        }
      }
      EXPECT_TRUE(close(scaled.host(), half, 0, 0));
      EXPECT_TRUE(close(zeroed.host(), zeros, 0, 0));  // the padding between rows untouched
    }
  }
}

TEST_F(Elementwise, Bf16CopiesAreTheCpusBitForBit) {
  auto x = random_values(1000, 4, 100.0f);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1e-40f;         // subnormal
  x[3] = 3.3895314e38f;  // rounds up to infinity
  std::vector<BFloat16> expected(x.size());
  cpu().convert_to_bf16(x.data(), int64_t(x.size()), expected.data());
  DeviceArray<float> gx(x);
  DeviceArray<BFloat16> gy(x.size());
  gpu().convert_to_bf16(gx.data(), int64_t(x.size()), gy.data());
  const auto got = gy.host();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(got[i].bits, expected[i].bits) << "element " << i;
}

TEST_F(Elementwise, BiasForwardAndBackward) {
  const int64_t rows = 300, n = 70, ld = 75;  // more rows than one chunk of the column sums
  auto y = random_values(size_t(rows * ld), 5), bias = random_values(size_t(n), 6),
       dbias = random_values(n, 7);
  DeviceArray<float> gy(y), gbias(bias), gdbias(dbias);
  cpu().add_bias(y.data(), rows, n, ld, bias.data());
  gpu().add_bias(gy.data(), rows, n, ld, gbias.data());
  EXPECT_TRUE(close(gy.host(), y, 0, 0));
  cpu().bias_backward(y.data(), rows, n, ld, dbias.data());
  gpu().bias_backward(gy.data(), rows, n, ld, gdbias.data());
  EXPECT_TRUE(close(gdbias.host(), dbias, 1e-5, 1e-5));
}

TEST_F(Elementwise, GeluFillMaskAndCopy) {
  const int64_t rows = 19, n = 33;
  const auto x = random_values(size_t(rows * n), 8, 4.0f), dy = random_values(size_t(rows * n), 9);
  std::vector<float> y(x.size()), dx(x.size());
  DeviceArray<float> gx(x), gdy(dy), gy(x.size()), gdx(x.size());
  cpu().gelu_forward(x.data(), int64_t(x.size()), y.data());
  gpu().gelu_forward(gx.data(), int64_t(x.size()), gy.data());
  EXPECT_TRUE(close(gy.host(), y, 1e-6, 1e-6));
  cpu().gelu_backward(x.data(), dy.data(), int64_t(x.size()), dx.data());
  gpu().gelu_backward(gx.data(), gdy.data(), int64_t(x.size()), gdx.data());
  EXPECT_TRUE(close(gdx.host(), dx, 1e-6, 1e-6));

  std::vector<float> mask(rows, 1.0f);
  mask[3] = 0.0f;
  mask[7] = 0.0f;
  DeviceArray<float> gmask(mask);
  cpu().mask_rows(y.data(), rows, n, mask.data());
  gpu().mask_rows(gy.data(), rows, n, gmask.data());
  EXPECT_TRUE(close(gy.host(), y, 1e-6, 1e-6));

  // Rows of 20 out of a row stride of 33, into a row stride of 25, overwritten then accumulated.
  std::vector<float> dst = random_values(size_t(rows * 25), 10);
  DeviceArray<float> gdst(dst);
  for (bool accumulate : {false, true}) {
    cpu().copy_rows(x.data(), n, rows, 20, dst.data(), 25, accumulate);
    gpu().copy_rows(gx.data(), n, rows, 20, gdst.data(), 25, accumulate);
    EXPECT_TRUE(close(gdst.host(), dst, 0, 0));
  }
  cpu().fill(dst.data(), 40, -2.5f);
  gpu().fill(gdst.data(), 40, -2.5f);
  EXPECT_TRUE(close(gdst.host(), dst, 0, 0));
}

TEST_F(Elementwise, DelayForwardAndBackward) {
  const int64_t batch = 3, seq = 11, n = 24, ld = 40;
  const auto src = random_values(size_t(batch * seq * n), 11), first = random_values(size_t(n), 12);
  std::vector<float> dst = random_values(size_t(batch * seq * ld), 13);
  DeviceArray<float> gsrc(src), gfirst(first), gdst(dst);
  cpu().delay_forward(src.data(), first.data(), batch, seq, n, dst.data(), ld);
  gpu().delay_forward(gsrc.data(), gfirst.data(), batch, seq, n, gdst.data(), ld);
  EXPECT_TRUE(close(gdst.host(), dst, 0, 0));

  std::vector<float> dsrc(src.size()), dfirst = random_values(size_t(n), 14);
  DeviceArray<float> gdsrc(dsrc.size()), gdfirst(dfirst);
  cpu().delay_backward(dst.data(), ld, batch, seq, n, dsrc.data(), dfirst.data());
  gpu().delay_backward(gdst.data(), ld, batch, seq, n, gdsrc.data(), gdfirst.data());
  EXPECT_TRUE(close(gdsrc.host(), dsrc, 0, 0));
  EXPECT_TRUE(close(gdfirst.host(), dfirst, 1e-6, 1e-6));
}

TEST_F(Elementwise, AddScaledForwardAndBackward) {
  const int64_t rows = 270, n = 45;
  const auto x = random_values(size_t(rows * n), 15), scale = random_values(size_t(n), 16),
             dy = random_values(size_t(rows * n), 17);
  std::vector<float> y = random_values(size_t(rows * n), 18), dx(x.size()),
                     dscale = random_values(size_t(n), 19);
  DeviceArray<float> gx(x), gscale(scale), gdy(dy), gy(y), gdx(x.size()), gdscale(dscale);
  cpu().add_scaled(x.data(), scale.data(), rows, n, y.data());
  gpu().add_scaled(gx.data(), gscale.data(), rows, n, gy.data());
  EXPECT_TRUE(close(gy.host(), y, 1e-6, 1e-6));
  cpu().add_scaled_backward(x.data(), scale.data(), dy.data(), rows, n, dx.data(), dscale.data());
  gpu().add_scaled_backward(gx.data(), gscale.data(), gdy.data(), rows, n, gdx.data(), gdscale.data());
  EXPECT_TRUE(close(gdx.host(), dx, 0, 0));
  EXPECT_TRUE(close(gdscale.host(), dscale, 1e-5, 1e-5));
}

// Rows of 300 in chunks of 64 (the last one short) take one pass for dx and the weight's gradient; rows of
// 8200, past what that pass sums in shared memory, take two.
TEST_F(Elementwise, RmsnormForwardAndBackward) {
  for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{290, 300}, {70, 8200}}) {
    const auto x = random_values(size_t(rows * n), 20, 3.0f), weight = random_values(size_t(n), 21),
               dy = random_values(size_t(rows * n), 22);
    std::vector<float> y(x.size()), rstd(rows), dweight = random_values(size_t(n), 23);
    DeviceArray<float> gx(x), gweight(weight), gdy(dy), gy(x.size()), grstd{size_t(rows)}, gdweight(dweight);
    cpu().rmsnorm_forward(x.data(), weight.data(), rows, n, 1e-5f, y.data(), rstd.data());
    gpu().rmsnorm_forward(gx.data(), gweight.data(), rows, n, 1e-5f, gy.data(), grstd.data());
    EXPECT_TRUE(close(grstd.host(), rstd, 0, 1e-5)) << n;
    EXPECT_TRUE(close(gy.host(), y, 1e-6, 1e-5)) << n;
    for (bool accumulate : {false, true}) {
      std::vector<float> dx = random_values(x.size(), 24);
      DeviceArray<float> gdx(dx);
      cpu().rmsnorm_backward(x.data(), weight.data(), rstd.data(), dy.data(), rows, n, dx.data(), accumulate,
                             dweight.data());
      gpu().rmsnorm_backward(gx.data(), gweight.data(), grstd.data(), gdy.data(), rows, n, gdx.data(),
                             accumulate, gdweight.data());
      EXPECT_TRUE(close(gdx.host(), dx, 1e-5, 1e-5)) << n;
      EXPECT_TRUE(close(gdweight.host(), dweight, 1e-4, 1e-5)) << n;
    }
  }
}

TEST_F(Elementwise, ResidualScaleForwardAndBackward) {
  const int64_t rows = 260, n = 40;
  const auto h = random_values(size_t(rows * n), 25), r = random_values(size_t(rows * n), 26);
  const auto hb = random_values(size_t(n), 27), hs = random_values(size_t(n), 28),
             rb = random_values(size_t(n), 29), rs = random_values(size_t(n), 30),
             dout = random_values(size_t(rows * n), 31);
  std::vector<float> out(h.size());
  DeviceArray<float> gh(h), gr(r), ghb(hb), ghs(hs), grb(rb), grs(rs), gdout(dout), gout(h.size());
  cpu().residual_scale_forward(h.data(), r.data(), hb.data(), hs.data(), rb.data(), rs.data(), rows, n,
                               out.data());
  gpu().residual_scale_forward(gh.data(), gr.data(), ghb.data(), ghs.data(), grb.data(), grs.data(), rows, n,
                               gout.data());
  EXPECT_TRUE(close(gout.host(), out, 1e-6, 1e-6));

  std::vector<float> dh(h.size()), dr(h.size()), grads[4];
  for (int i = 0; i < 4; ++i) grads[i] = random_values(size_t(n), 32 + uint64_t(i));
  DeviceArray<float> gdh(h.size()), gdr(h.size()), g0(grads[0]), g1(grads[1]), g2(grads[2]), g3(grads[3]);
  cpu().residual_scale_backward(h.data(), r.data(), hb.data(), hs.data(), rb.data(), rs.data(), dout.data(),
                                rows, n, dh.data(), dr.data(), grads[0].data(), grads[1].data(),
                                grads[2].data(), grads[3].data());
  gpu().residual_scale_backward(gh.data(), gr.data(), ghb.data(), ghs.data(), grb.data(), grs.data(),
                                gdout.data(), rows, n, gdh.data(), gdr.data(), g0.data(), g1.data(),
                                g2.data(), g3.data());
  EXPECT_TRUE(close(gdh.host(), dh, 0, 0));
  EXPECT_TRUE(close(gdr.host(), dr, 0, 0));
  EXPECT_TRUE(close(g0.host(), grads[0], 1e-5, 1e-5));
  EXPECT_TRUE(close(g1.host(), grads[1], 1e-5, 1e-5));
  EXPECT_TRUE(close(g2.host(), grads[2], 1e-5, 1e-5));
  EXPECT_TRUE(close(g3.host(), grads[3], 1e-5, 1e-5));

  // dr in place of dout (as the model's backward passes it): the same dr and, from the same starts, the same
  // gradients, bit for bit.
  DeviceArray<float> gdr_in_place(dout), a0(random_values(size_t(n), 32)), a1(random_values(size_t(n), 33)),
      a2(random_values(size_t(n), 34)), a3(random_values(size_t(n), 35));
  gpu().residual_scale_backward(gh.data(), gr.data(), ghb.data(), ghs.data(), grb.data(), grs.data(),
                                gdr_in_place.data(), rows, n, gdh.data(), gdr_in_place.data(), a0.data(),
                                a1.data(), a2.data(), a3.data());
  EXPECT_TRUE(close(gdr_in_place.host(), dr, 0, 0));
  EXPECT_TRUE(close(a0.host(), g0.host(), 0, 0));
  EXPECT_TRUE(close(a1.host(), g1.host(), 0, 0));
  EXPECT_TRUE(close(a2.host(), g2.host(), 0, 0));
  EXPECT_TRUE(close(a3.host(), g3.host(), 0, 0));
}

}  // namespace
}  // namespace zaya::test
