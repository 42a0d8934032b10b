// The GPU backend's CCA ops (the q-k mean skip, the two causal convolutions, L2 normalisation, rotary
// embeddings) against the CPU backend, on small shapes (the emulator runs every GPU thread as a fiber) that
// still reach the edges: sequences shorter than the kernels, head sizes that are not a multiple of the
// tiles, more tokens than one chunk of the parameter-gradient sums, gradients accumulated onto non-zero
// values, zero vectors under the norm's floor.

#include <algorithm>
#include <cmath>
#include <ostream>

#include "gpu/gpu_test_util.h"

namespace zaya::test {
namespace {

using GpuCca = GpuOpsTest;

TEST_F(GpuCca, QkMeanForwardAndBackward) {
  // Two and three query heads per kv head; rows wider than q and k (ld), as the projection's output is.
  for (const AttentionShape shape : {AttentionShape{2, 13, 4, 2, 16, 0}, AttentionShape{1, 7, 6, 2, 12, 0}}) {
    const int64_t tokens = shape.batch * shape.seq, d = shape.head_dim;
    const int64_t ld = (shape.heads + shape.kv_heads) * d + 5;
    const auto qk = random_values(size_t(tokens * ld), 1);
    std::vector<float> q_res(size_t(tokens * shape.heads * d)), k_res(size_t(tokens * shape.kv_heads * d));
    DeviceArray<float> gqk(qk), gq_res(q_res.size()), gk_res(k_res.size());
    cpu().qk_mean_forward(qk.data(), tokens, ld, shape, q_res.data(), k_res.data());
    gpu().qk_mean_forward(gqk.data(), tokens, ld, shape, gq_res.data(), gk_res.data());
    // The CPU's arithmetic in the CPU's order: only a compiler's fused multiply-add may round differently.
    EXPECT_TRUE(close(gq_res.host(), q_res, 1e-6, 1e-6));
    EXPECT_TRUE(close(gk_res.host(), k_res, 1e-6, 1e-6));

    // dqk accumulates: it starts from random values, the columns past q and k included (left untouched).
    const auto dq_res = random_values(q_res.size(), 2), dk_res = random_values(k_res.size(), 3);
    std::vector<float> dqk = random_values(qk.size(), 4);
    DeviceArray<float> gdq_res(dq_res), gdk_res(dk_res), gdqk(dqk);
    cpu().qk_mean_backward(dq_res.data(), dk_res.data(), tokens, ld, shape, dqk.data());
    gpu().qk_mean_backward(gdq_res.data(), gdk_res.data(), tokens, ld, shape, gdqk.data());
    // As above: the same sums in the same order, up to fused multiply-adds.
    EXPECT_TRUE(close(gdqk.host(), dqk, 1e-6, 1e-6));
  }
}

struct ConvCase {
  int64_t batch, seq, head_dim, k0, k1;
};

void PrintTo(const ConvCase& c, std::ostream* os) {
  *os << "batch " << c.batch << ", seq " << c.seq << ", head_dim " << c.head_dim << ", k0 " << c.k0 << ", k1 "
      << c.k1;
}

class GpuCcaConv : public GpuOpsTest, public testing::WithParamInterface<ConvCase> {};

// In bf16 both sides round the same operands (the depthwise output, the taps, the output gradient) and sum
// the exact products in f32: the bounds are the f32 ones.
TEST_P(GpuCcaConv, ForwardAndBackwardMatchTheCpu) {
  const ConvCase c = GetParam();
  for (const Precision precision : {Precision::F32, Precision::BF16}) {
    SCOPED_TRACE(precision == Precision::BF16 ? "bf16" : "f32");
    const AttentionShape shape{c.batch, c.seq, 4, 2, c.head_dim, 0};
    const int64_t channels = (shape.heads + shape.kv_heads) * c.head_dim, dw_len = c.seq + c.k1 - 1;
    const size_t x_size = size_t(c.batch * c.seq * channels), dw_size = size_t(c.batch * dw_len * channels);
    const size_t dw_weight_size = size_t(channels * c.k0),
                 g_weight_size = size_t(channels * c.head_dim * c.k1);
    const auto x = random_values(x_size, 10), dw_weight = random_values(dw_weight_size, 11),
               dw_bias = random_values(size_t(channels), 12),
               g_weight = random_values(g_weight_size, 13, 0.25f),
               g_bias = random_values(size_t(channels), 14);
    std::vector<float> dw(dw_size), out(x_size);
    std::vector<float> cpu_scratch(size_t(cpu().cca_conv_scratch(shape, c.k0, c.k1)));
    DeviceArray<float> gx(x), gdw_weight(dw_weight), gdw_bias(dw_bias), gg_weight(g_weight), gg_bias(g_bias),
        gdw(dw_size), gout(x_size), gscratch(size_t(gpu().cca_conv_scratch(shape, c.k0, c.k1)));
    cpu().cca_conv_forward(precision, x.data(), shape, c.k0, c.k1, dw_weight.data(), dw_bias.data(),
                           g_weight.data(), g_bias.data(), dw.data(), out.data(), cpu_scratch.data());
    gpu().cca_conv_forward(precision, gx.data(), shape, c.k0, c.k1, gdw_weight.data(), gdw_bias.data(),
                           gg_weight.data(), gg_bias.data(), gdw.data(), gout.data(), gscratch.data());
    // The depthwise output is the CPU's sum in the CPU's order (up to fused multiply-adds); the grouped one
    // sums head_dim * k1 <= 80 products of values near 1 in another order than oneDNN's: a few f32 ulps.
    EXPECT_TRUE(close(gdw.host(), dw, 1e-6, 1e-6));
    EXPECT_TRUE(close(gout.host(), out, 1e-5, 1e-5));

    // dx is overwritten (it starts from garbage); the four parameter gradients accumulate onto random values.
    const auto dout = random_values(x_size, 15);
    std::vector<float> dx = random_values(x_size, 16), d_dw_weight = random_values(dw_weight_size, 17),
                       d_dw_bias = random_values(size_t(channels), 18),
                       d_g_weight = random_values(g_weight_size, 19),
                       d_g_bias = random_values(size_t(channels), 20);
    DeviceArray<float> gdout(dout), gdx(dx), gd_dw_weight(d_dw_weight), gd_dw_bias(d_dw_bias),
        gd_g_weight(d_g_weight), gd_g_bias(d_g_bias);
    cpu().cca_conv_backward(precision, x.data(), dw.data(), dout.data(), shape, c.k0, c.k1, dw_weight.data(),
                            g_weight.data(), dx.data(), d_dw_weight.data(), d_dw_bias.data(),
                            d_g_weight.data(), d_g_bias.data(), cpu_scratch.data());
    gpu().cca_conv_backward(precision, gx.data(), gdw.data(), gdout.data(), shape, c.k0, c.k1,
                            gdw_weight.data(), gg_weight.data(), gdx.data(), gd_dw_weight.data(),
                            gd_dw_bias.data(), gd_g_weight.data(), gd_g_bias.data(), gscratch.data());
    // dx sums head_dim * k1 products, then k0 more, in an order other than the CPU's (as the forward). The
    // parameter gradients sum over up to batch * (seq + k1 - 1) = 304 tokens of terms up to ~10 (dw is a
    // bias plus k0 products), partial sums reaching ~100: their order differs from the CPU's, so the bound is
    // a few ulps of those partial sums (1e-4 absolute), plus 1e-5 relative.
    EXPECT_TRUE(close(gdx.host(), dx, 1e-5, 1e-5));
    EXPECT_TRUE(close(gd_g_bias.host(), d_g_bias, 1e-4, 1e-5));
    EXPECT_TRUE(close(gd_g_weight.host(), d_g_weight, 1e-4, 1e-5));
    EXPECT_TRUE(close(gd_dw_bias.host(), d_dw_bias, 1e-4, 1e-5));
    EXPECT_TRUE(close(gd_dw_weight.host(), d_dw_weight, 1e-4, 1e-5));

    // The same inputs give the same bits (what a GPU run checks): every sum over tokens has a fixed order.
    std::vector<float> runs[2][4];
    for (auto& run : runs) {
      DeviceArray<float> again_dx(x_size), again_dw_weight(dw_weight_size), again_dw_bias{size_t(channels)},
          again_g_weight(g_weight_size), again_g_bias{size_t(channels)};
      gpu().cca_conv_backward(precision, gx.data(), gdw.data(), gdout.data(), shape, c.k0, c.k1,
                              gdw_weight.data(), gg_weight.data(), again_dx.data(), again_dw_weight.data(),
                              again_dw_bias.data(), again_g_weight.data(), again_g_bias.data(),
                              gscratch.data());
      run[0] = again_dw_weight.host();
      run[1] = again_dw_bias.host();
      run[2] = again_g_weight.host();
      run[3] = again_g_bias.host();
    }
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(close(runs[0][i], runs[1][i], 0, 0)) << "gradient " << i;
  }
}

// Decoding's convolution: `batch` windows of (k0 - 1) + (k1 - 1) + 1 latest inputs, one output each.
TEST_P(GpuCcaConv, DecodeMatchesTheCpu) {
  const ConvCase c = GetParam();
  const AttentionShape shape{c.batch, 1, 4, 2, c.head_dim, 0};
  const int64_t channels = (shape.heads + shape.kv_heads) * c.head_dim, rows = (c.k0 - 1) + (c.k1 - 1) + 1;
  const auto window = random_values(size_t(c.batch * rows * channels), 40),
             dw_weight = random_values(size_t(channels * c.k0), 41),
             dw_bias = random_values(size_t(channels), 42),
             g_weight = random_values(size_t(channels * c.head_dim * c.k1), 43, 0.25f),
             g_bias = random_values(size_t(channels), 44);
  std::vector<float> out(size_t(c.batch * channels));
  DeviceArray<float> gwindow(window), gdw_weight(dw_weight), gdw_bias(dw_bias), gg_weight(g_weight),
      gg_bias(g_bias), gout(out.size());
  cpu().cca_conv_decode(window.data(), shape, c.k0, c.k1, dw_weight.data(), dw_bias.data(), g_weight.data(),
                        g_bias.data(), out.data());
  gpu().cca_conv_decode(gwindow.data(), shape, c.k0, c.k1, gdw_weight.data(), gdw_bias.data(),
                        gg_weight.data(), gg_bias.data(), gout.data());
  // head_dim * k1 <= 80 products of values near 1, summed in another order: a few f32 ulps.
  EXPECT_TRUE(close(gout.host(), out, 1e-5, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(GpuCca, GpuCcaConv,
                         testing::Values(ConvCase{2, 13, 16, 2, 2},  // the model's kernels
                                         ConvCase{2, 13, 20, 3, 4},  // head_dim not a multiple of the tiles
                                         ConvCase{2, 2, 16, 4, 3},   // sequences shorter than both kernels
                                         ConvCase{3, 5, 8, 1, 1},    // no padding at all
                                         ConvCase{2, 150, 16, 2, 2}  // more tokens than one chunk of the sums
                                         ));

TEST_F(GpuCca, L2normForwardAndBackward) {
  // rows > 256: the dtemp column sums take several chunks; head_dim 40 > a warp of 32 lanes.
  const int64_t rows = 270, heads = 3, head_dim = 40, count = rows * heads * head_dim;
  auto x = random_values(size_t(count), 30, 2.0f);
  // Two zero vectors: their norms sit on the floor (eps), their outputs are zero, their gradients finite.
  std::fill(x.begin() + 4 * head_dim, x.begin() + 5 * head_dim, 0.0f);
  std::fill(x.end() - head_dim, x.end(), 0.0f);
  const auto temp = random_values(size_t(heads), 31), dout = random_values(size_t(count), 32);
  DeviceArray<float> gx(x), gtemp(temp), gdout(dout);
  for (const bool with_temp : {false, true}) {
    SCOPED_TRACE(with_temp ? "with temp" : "without temp");
    std::vector<float> out(static_cast<size_t>(count)), norms(static_cast<size_t>(rows * heads));
    DeviceArray<float> gout(out.size()), gnorms(norms.size());
    cpu().l2norm_forward(x.data(), rows, heads, head_dim, with_temp ? temp.data() : nullptr, out.data(),
                         norms.data());
    gpu().l2norm_forward(gx.data(), rows, heads, head_dim, with_temp ? gtemp.data() : nullptr, gout.data(),
                         gnorms.data());
    // A sum of 40 squares in a tree rather than in sequence, then a square root and a product: a few ulps.
    EXPECT_TRUE(close(gnorms.host(), norms, 0, 1e-6));
    EXPECT_TRUE(close(gout.host(), out, 1e-6, 1e-6));

    std::vector<float> dx = random_values(size_t(count), 33), dtemp = random_values(size_t(heads), 34);
    DeviceArray<float> gdx(dx), gdtemp(dtemp);
    cpu().l2norm_backward(x.data(), norms.data(), dout.data(), rows, heads, head_dim,
                          with_temp ? temp.data() : nullptr, dx.data(), with_temp ? dtemp.data() : nullptr);
    gpu().l2norm_backward(gx.data(), gnorms.data(), gdout.data(), rows, heads, head_dim,
                          with_temp ? gtemp.data() : nullptr, gdx.data(),
                          with_temp ? gdtemp.data() : nullptr);
    // dx: the dot product and the squares summed in a tree, then a difference dy - x (x.dy) / |x|^2 that can
    // cancel, so an absolute term too; a zero vector's dx is dy * sqrt(d) / eps (~1e7) on both sides.
    EXPECT_TRUE(close(gdx.host(), dx, 1e-5, 1e-5));
    // dtemp (accumulated) sums 270 terms of magnitude ~5 in another order than the CPU's: a few ulps of the
    // partial sums (~100).
    EXPECT_TRUE(close(gdtemp.host(), dtemp, 1e-4, 1e-5));
  }
}

TEST_F(GpuCca, RopeForwardAndInverse) {
  const int64_t batch = 2, seq = 13, heads = 4, head_dim = 16;
  // Partial rotary (the channels past rotary_dim untouched) and the whole head.
  for (const int64_t rotary_dim : {int64_t(8), head_dim}) {
    SCOPED_TRACE(rotary_dim);
    const int64_t half = rotary_dim / 2;
    std::vector<float> x = random_values(size_t(batch * seq * heads * head_dim), 40, 3.0f);
    std::vector<float> cos(static_cast<size_t>(seq * half)), sin(cos.size());
    for (int64_t s = 0; s < seq; ++s) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = double(s) * std::pow(10000.0, -2.0 * double(i) / double(rotary_dim));
        cos[size_t(s * half + i)] = float(std::cos(angle));
        sin[size_t(s * half + i)] = float(std::sin(angle));
      }
    }
    DeviceArray<float> gx(x), gcos(cos), gsin(sin);
    for (const bool inverse : {false, true}) {
      cpu().rope(x.data(), batch, seq, heads, head_dim, rotary_dim, cos.data(), sin.data(), inverse);
      gpu().rope(gx.data(), batch, seq, heads, head_dim, rotary_dim, gcos.data(), gsin.data(), inverse);
      // The CPU's two products and a sum per value: only fused multiply-adds may round differently.
      EXPECT_TRUE(close(gx.host(), x, 1e-6, 1e-6));
    }
  }
}

}  // namespace
}  // namespace zaya::test
