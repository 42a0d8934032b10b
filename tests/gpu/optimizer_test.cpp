// The GPU backend's optimizer ops (sum of squares, AdamW, momentum, decay, Newton-Schulz) and the embedding
// against the CPU backend. Each tolerance is stated where it is used, with its reason; the GPU ops are also
// checked to repeat bit for bit, which is what their fixed-order reductions promise.

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "unit/reference_data.h"

namespace zaya::test {
namespace {

using GpuOptimizer = GpuOpsTest;
using GpuEmbedding = GpuOpsTest;

TEST_F(GpuOptimizer, SumSquaresAddsOntoTheStartInAFixedOrder) {
  // More elements than the partial sums' 1024 blocks of 256 threads cover at once (so threads stride), and
  // not a multiple of a block.
  const int64_t count = 300001;
  const auto x = random_values(size_t(count), 1, 2.0f);
  DeviceArray<float> gx(x);
  double expected = 12.5;
  cpu().sum_squares(x.data(), count, &expected);
  DeviceArray<double> gsum(std::vector<double>{12.5});
  gpu().sum_squares(gx.data(), count, gsum.data());
  const double got = gsum.host()[0];
  // Both sum exact f32 squares in double, in different orders: each addition errs by at most 2^-53 (1.1e-16)
  // of the running sum, so 3e5 of them stay below 3e5 * 1.1e-16 = 3.3e-11 relative even if all erred the same
  // way; random signs make it ~1e-15 (observed 5e-15). Bound 1e-12.
  EXPECT_NEAR(got, expected, 1e-12 * expected);

  // The same input adds the same bits; an empty input adds nothing.
  DeviceArray<double> again(std::vector<double>{12.5});
  gpu().sum_squares(gx.data(), count, again.data());
  gpu().sum_squares(gx.data(), 0, again.data());
  EXPECT_EQ(again.host()[0], got);
}

TEST_F(GpuOptimizer, AdamWMatchesTheCpuOverSteps) {
  const int64_t count = 1000;
  std::vector<float> param = random_values(size_t(count), 2), m(static_cast<size_t>(count)),
                     v(static_cast<size_t>(count));
  DeviceArray<float> gparam(param), gm(m), gv(v);
  const float beta1 = 0.9f, beta2 = 0.95f;
  for (int t = 1; t <= 3; ++t) {
    const auto grad = random_values(size_t(count), 10 + uint64_t(t));
    DeviceArray<float> ggrad(grad);
    Ops::AdamWStep step{};
    step.lr = 1e-2f;
    step.beta1 = beta1;
    step.beta2 = beta2;
    step.eps = 1e-8f;
    step.weight_decay = 0.1f;
    step.grad_scale = 0.5f;
    step.bias_correction1 = 1.0f - std::pow(beta1, float(t));
    step.bias_correction2 = 1.0f - std::pow(beta2, float(t));
    cpu().adamw_step(param.data(), grad.data(), m.data(), v.data(), count, step);
    gpu().adamw_step(gparam.data(), ggrad.data(), gm.data(), gv.data(), count, step);
    // The same f32 operations in the same order; only a compiler's fused multiply-adds may round
    // differently, by an ulp or so of each term: 1e-6 relative (8 ulps) plus 1e-7 for values near zero.
    EXPECT_TRUE(close(gm.host(), m, 1e-7, 1e-6)) << "step " << t;
    EXPECT_TRUE(close(gv.host(), v, 1e-7, 1e-6)) << "step " << t;
    EXPECT_TRUE(close(gparam.host(), param, 1e-7, 1e-6)) << "step " << t;
  }
}

TEST_F(GpuOptimizer, MomentumWithAndWithoutNesterov) {
  const int64_t count = 700;
  for (bool nesterov : {false, true}) {
    std::vector<float> buf = random_values(size_t(count), 20), out(static_cast<size_t>(count));
    DeviceArray<float> gbuf(buf), gout(out);
    for (int step = 0; step < 2; ++step) {
      const auto grad = random_values(size_t(count), 21 + uint64_t(step));
      DeviceArray<float> ggrad(grad);
      cpu().momentum_step(buf.data(), grad.data(), count, 0.95f, nesterov, 0.25f, out.data());
      gpu().momentum_step(gbuf.data(), ggrad.data(), count, 0.95f, nesterov, 0.25f, gout.data());
      // As AdamW: the same operations, fused multiply-adds the only difference.
      EXPECT_TRUE(close(gbuf.host(), buf, 1e-7, 1e-6)) << "nesterov " << nesterov << ", step " << step;
      EXPECT_TRUE(close(gout.host(), out, 1e-7, 1e-6)) << "nesterov " << nesterov << ", step " << step;
    }
  }
}

TEST_F(GpuOptimizer, DecayAndSubtract) {
  const int64_t count = 500;
  std::vector<float> param = random_values(size_t(count), 30);
  const auto update = random_values(size_t(count), 31);
  DeviceArray<float> gparam(param), gupdate(update);
  cpu().decay_and_subtract(param.data(), update.data(), count, 1e-3f, 0.02f);
  gpu().decay_and_subtract(gparam.data(), gupdate.data(), count, 1e-3f, 0.02f);
  EXPECT_TRUE(close(gparam.host(), param, 1e-7, 1e-6));  // as AdamW
}

struct NewtonSchulzCase {
  Precision precision;
  int64_t count, rows, cols;
};

void PrintTo(const NewtonSchulzCase& c, std::ostream* os) {
  *os << (c.precision == Precision::BF16 ? "bf16 " : "f32 ") << c.count << " x [" << c.rows << ", " << c.cols
      << "]";
}

class GpuNewtonSchulz : public GpuOpsTest, public testing::WithParamInterface<NewtonSchulzCase> {};

TEST_P(GpuNewtonSchulz, MatchesTheCpu) {
  const NewtonSchulzCase c = GetParam();
  const float coefficients[3] = {3.4445f, -4.7750f, 2.0315f};  // Muon's quintic
  const int steps = 5;
  std::vector<float> x = random_values(size_t(c.count * c.rows * c.cols), 40), exact = x;
  DeviceArray<float> gx(x), again(x);
  cpu().newton_schulz(c.precision, x.data(), c.count, c.rows, c.cols, steps, coefficients);
  gpu().newton_schulz(c.precision, gx.data(), c.count, c.rows, c.cols, steps, coefficients);
  const auto got = gx.host();
  if (c.precision == Precision::F32) {
    // The products differ from the CPU's only in the order of their f32 sums (~1e-7 relative), but the
    // iteration amplifies differences in the directions of small singular values (by up to a = 3.4 a step):
    // 2e-5 absolute on entries of size ~0.2 (observed < 1e-6 in the emulator; a GPU's blocked sums differ
    // more).
    EXPECT_TRUE(close(got, x, 2e-5, 0));
  } else {
    // Both sides round the same f32 iterates to bf16, but those iterates differ by f32 sum order, so an
    // element near a rounding boundary rounds to the neighbouring bf16 value, and that difference is carried
    // through the remaining steps as any bf16 error is. So the bound is derived: against the f32 iteration,
    // the GPU's bf16 result is as accurate as the CPU's (relative L2 error at most 1.5 times, plus f32
    // noise).
    cpu().newton_schulz(Precision::F32, exact.data(), c.count, c.rows, c.cols, steps, coefficients);
    EXPECT_LE(relative_error(got, exact), 1.5 * relative_error(x, exact) + 1e-5);
  }
  gpu().newton_schulz(c.precision, again.data(), c.count, c.rows, c.cols, steps, coefficients);
  EXPECT_TRUE(close(again.host(), got, 0, 0));  // repeats bit for bit
}

INSTANTIATE_TEST_SUITE_P(GpuOptimizer, GpuNewtonSchulz,
                         testing::Values(NewtonSchulzCase{Precision::F32, 3, 24, 40},
                                         NewtonSchulzCase{Precision::F32, 3, 40, 24},
                                         NewtonSchulzCase{Precision::F32, 2, 32, 32},
                                         NewtonSchulzCase{Precision::BF16, 3, 24, 40},
                                         NewtonSchulzCase{Precision::BF16, 3, 40, 24},
                                         NewtonSchulzCase{Precision::BF16, 2, 32, 32}));

TEST_F(GpuEmbedding, ForwardMatchesTheCpu) {
  const int64_t vocab = 50, hidden = 70, tokens = 90;
  std::vector<int32_t> ids(tokens);
  for (int64_t t = 0; t < tokens; ++t) ids[size_t(t)] = int32_t((t * 37 + 11) % vocab);
  const auto table = random_values(size_t(vocab * hidden), 50), bias = random_values(size_t(hidden), 51),
             scale = random_values(size_t(hidden), 52);
  std::vector<float> out(size_t(tokens * hidden));
  DeviceArray<int32_t> gids(ids);
  DeviceArray<float> gtable(table), gbias(bias), gscale(scale), gout(out.size());
  cpu().embedding_forward(ids.data(), tokens, table.data(), hidden, bias.data(), scale.data(), out.data());
  gpu().embedding_forward(gids.data(), tokens, gtable.data(), hidden, gbias.data(), gscale.data(),
                          gout.data());
  EXPECT_TRUE(close(gout.host(), out, 0, 0));  // one addition and one product: the same bits
}

// The backward of `tokens` tokens whose ids are random in [0, vocab) with every other one `frequent` (a
// run longer than a sort tile when tokens > 2048) and every 7th the padding id 0.
void check_backward(Ops& gpu, Ops& cpu, int64_t tokens, int32_t skip_id) {
  const int64_t vocab = 40, hidden = 40;
  const int32_t frequent = 5;
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  const auto draws = random_values(size_t(tokens), 60);
  for (int64_t t = 0; t < tokens; ++t) {
    const int32_t drawn = int32_t((draws[size_t(t)] + 1.0f) * 0.5f * float(vocab)) % int32_t(vocab);
    ids[size_t(t)] = t % 7 == 0 ? 0 : t % 2 == 0 ? frequent : drawn;
  }
  const auto table = random_values(size_t(vocab * hidden), 61), bias = random_values(size_t(hidden), 62),
             scale = random_values(size_t(hidden), 63), dout = random_values(size_t(tokens * hidden), 64);
  // The gradients start non-zero: the op accumulates.
  std::vector<float> dtable = random_values(table.size(), 65), dbias = random_values(size_t(hidden), 66),
                     dscale = random_values(size_t(hidden), 67);
  DeviceArray<int32_t> gids(ids);
  DeviceArray<float> gtable(table), gbias(bias), gscale(scale), gdout(dout);
  DeviceArray<float> gdtable(dtable), gdbias(dbias), gdscale(dscale), again(dtable);
  const std::vector<float> start = dtable;
  cpu.embedding_backward(ids.data(), tokens, table.data(), hidden, bias.data(), scale.data(), dout.data(),
                         skip_id, dtable.data(), dbias.data(), dscale.data());
  gpu.embedding_backward(gids.data(), tokens, gtable.data(), hidden, gbias.data(), gscale.data(),
                         gdout.data(), skip_id, gdtable.data(), gdbias.data(), gdscale.data());
  const auto got = gdtable.host();
  // f32 sums of the same n terms (random signs, spread s) in another order: the rounding errors add up as a
  // random walk, ~sqrt(n) errors of 2^-24 (6e-8) of partial sums of size ~sqrt(n) s, so ~n * 6e-8 * s. A
  // table row sums up to tokens / 2 terms dout * scale (s ~ 1/3): 2.5e-5 at 2500 tokens (observed 2.5e-5),
  // bound 1e-4; dbias and dscale sum `tokens` terms (s up to ~0.6): 1e-4 (observed 4.8e-5, 5.7e-5), bound
  // 3e-4.
  EXPECT_TRUE(close(got, dtable, 1e-4, 1e-5));
  EXPECT_TRUE(close(gdbias.host(), dbias, 3e-4, 1e-5));
  EXPECT_TRUE(close(gdscale.host(), dscale, 3e-4, 1e-5));
  if (skip_id >= 0) {  // the padding row is untouched
    for (int64_t j = 0; j < hidden; ++j) {
      ASSERT_EQ(got[size_t(skip_id * hidden + j)], start[size_t(skip_id * hidden + j)]) << "column " << j;
    }
  }
  // The same inputs give the same bits.
  std::vector<float> spare_bias(static_cast<size_t>(hidden)), spare_scale(static_cast<size_t>(hidden));
  DeviceArray<float> gspare_bias(spare_bias), gspare_scale(spare_scale);
  gpu.embedding_backward(gids.data(), tokens, gtable.data(), hidden, gbias.data(), gscale.data(),
                         gdout.data(), skip_id, again.data(), gspare_bias.data(), gspare_scale.data());
  EXPECT_TRUE(close(again.host(), got, 0, 0));
}

TEST_F(GpuEmbedding, BackwardSumsRepeatedIdsAndSkipsThePadding) {
  // Three sort tiles, so the merges past a tile run too.
  check_backward(gpu(), cpu(), 2500, 0);
}

TEST_F(GpuEmbedding, BackwardWithoutPaddingSkipsNothing) {
  check_backward(gpu(), cpu(), 300, -1);  // one partial tile
}

}  // namespace
}  // namespace zaya::test
