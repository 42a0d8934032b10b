// The GPU backend's router, MoE data movement, SwiGLU and cross-entropy against the CPU backend.
// Tolerances: where both sides do the same f32 operations in the same order the only differences are the
// exponential (the CPU's vectorised Cephes exp and the device's expf are each within 2 ulp) and a GPU's
// fused multiply-adds, so the bound is a few f32 ulps (1e-5 relative); where the GPU sums in another order
// (a block's tree instead of a loop) the bound is the f32 rounding of the terms summed. Choices, counts, the
// grouping's order and offsets, and plain copies must be exactly equal.

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "core/buffer.h"
#include "core/dtype.h"
#include "gpu/gpu_test_util.h"

namespace zaya::test {
namespace {

using GpuRouting = GpuOpsTest;
using GpuLoss = GpuOpsTest;

// Expert choices in [0, experts]: about one token in six skip-routed (choice == experts), and `empty` (if
// it is an expert) never chosen.
std::vector<int32_t> random_choices(int64_t tokens, int64_t experts, int64_t empty, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::uniform_int_distribution<int32_t> expert(0, int32_t(experts) - 1);
  std::vector<int32_t> choice(static_cast<size_t>(tokens), static_cast<int32_t>(experts));
  for (int32_t& c : choice) {
    if (engine() % 6 == 0) continue;
    do c = expert(engine);
    while (c == empty && experts > 1);
  }
  return choice;
}

// Doubles that differ only by the order of double sums of at most a few thousand terms.
testing::AssertionResult close_sums(const std::vector<double>& gpu, const std::vector<double>& cpu) {
  for (size_t i = 0; i < cpu.size(); ++i) {
    if (!(std::abs(gpu[i] - cpu[i]) <= 1e-12 * (1 + std::abs(cpu[i])))) {
      return testing::AssertionFailure() << "sum " << i << ": GPU " << gpu[i] << ", CPU " << cpu[i];
    }
  }
  return testing::AssertionSuccess();
}

TEST_F(GpuRouting, RouteTop1ForwardAndBackward) {
  const int64_t tokens = 300, routes = 9, skip = routes - 1;
  auto logits = random_values(size_t(tokens * routes), 1, 3.0f);
  auto biases = random_values(size_t(routes), 2, 0.05f);
  biases[1] = biases[2] = 0.06f;  // the largest bias, shared: equal logits on routes 1 and 2 tie
  for (int64_t t = 0; t < tokens; ++t) {
    float* z = logits.data() + t * routes;
    if (t % 10 == 0) z[1] = z[2] = 8.0f;              // a tie between two routes: 1 wins
    if (t % 10 == 7) std::fill(z, z + routes, 0.5f);  // every probability equal: 1 wins
    if (t % 10 == 3 || t % 10 == 5) z[skip] = 8.0f;   // skip-routed: gate 0
  }
  std::vector<float> probs(logits.size()), gate(static_cast<size_t>(tokens)),
      lse(static_cast<size_t>(tokens));
  std::vector<int32_t> choice(static_cast<size_t>(tokens));
  DeviceArray<float> glogits(logits), gbiases(biases), gprobs(logits.size()), ggate(gate.size()),
      glse(lse.size());
  DeviceArray<int32_t> gchoice(choice.size());
  cpu().route_top1(logits.data(), biases.data(), tokens, routes, probs.data(), choice.data(), gate.data(),
                   lse.data());
  gpu().route_top1(glogits.data(), gbiases.data(), tokens, routes, gprobs.data(), gchoice.data(),
                   ggate.data(), glse.data());
  EXPECT_EQ(gchoice.host(), choice);
  EXPECT_EQ(choice[0], 1);
  EXPECT_EQ(choice[7], 1);
  EXPECT_EQ(choice[3], skip);
  // The same sums in the same order; only exp and log differ by ulps.
  EXPECT_TRUE(close(gprobs.host(), probs, 1e-7, 1e-5));
  EXPECT_TRUE(close(ggate.host(), gate, 1e-7, 1e-5));
  EXPECT_TRUE(close(glse.host(), lse, 1e-6, 1e-5));
  EXPECT_EQ(gate[3], 0.0f);

  // Backward from the same (the CPU's) probabilities and choices, into garbage that must be overwritten.
  const auto dgate = random_values(size_t(tokens), 3);
  std::vector<float> dlogits(logits.size());
  DeviceArray<float> gcpu_probs(probs), gdgate(dgate), gdlogits(random_values(logits.size(), 4));
  DeviceArray<int32_t> gcpu_choice(choice);
  cpu().route_top1_backward(probs.data(), choice.data(), dgate.data(), tokens, routes, dlogits.data());
  gpu().route_top1_backward(gcpu_probs.data(), gcpu_choice.data(), gdgate.data(), tokens, routes,
                            gdlogits.data());
  const auto got = gdlogits.host();
  // Two products and an add per element: equal but for a GPU's fused multiply-add.
  EXPECT_TRUE(close(got, dlogits, 1e-7, 1e-5));
  for (int64_t e = 0; e < routes; ++e) EXPECT_EQ(got[size_t(3 * routes + e)], 0.0f);  // skip-routed
}

TEST_F(GpuRouting, RouterStatisticsAccumulate) {
  const int64_t tokens = 600, routes = 9;  // three chunks of the first pass, the last partial
  auto probs = random_values(size_t(tokens * routes), 5);
  for (size_t i = 0; i < probs.size(); ++i)
    probs[i] = i % 13 == 0 ? 0.0f : std::abs(probs[i]);  // p = 0: no entropy
  const auto lse = random_values(size_t(tokens), 6, 4.0f);
  auto choice = random_choices(tokens, routes - 1, 4, 7);  // route 4 never chosen: its count stays
  std::vector<int64_t> counts(size_t(routes), 3);
  std::vector<double> prob_sums(size_t(routes), 0.5), entropy{1.25}, lse_square{2.5};
  DeviceArray<float> gprobs(probs), glse(lse);
  DeviceArray<int32_t> gchoice(choice);
  DeviceArray<int64_t> gcounts(counts);
  DeviceArray<double> gprob_sums(prob_sums), gentropy(entropy), glse_square(lse_square);
  for (int pass = 0; pass < 2; ++pass) {  // accumulates across micro-batches
    cpu().router_statistics(probs.data(), lse.data(), choice.data(), tokens, routes, counts.data(),
                            prob_sums.data(), entropy.data(), lse_square.data());
    gpu().router_statistics(gprobs.data(), glse.data(), gchoice.data(), tokens, routes, gcounts.data(),
                            gprob_sums.data(), gentropy.data(), glse_square.data());
  }
  EXPECT_EQ(gcounts.host(), counts);
  EXPECT_EQ(counts[4], 3);
  EXPECT_TRUE(close_sums(gprob_sums.host(), prob_sums));
  EXPECT_TRUE(close_sums(gentropy.host(), entropy));
  EXPECT_TRUE(close_sums(glse_square.host(), lse_square));

  // The same inputs give the same bits (a fixed order of sums, no atomics).
  DeviceArray<int64_t> again_counts(static_cast<size_t>(routes));
  DeviceArray<double> again_sums(static_cast<size_t>(routes)), again_entropy(1), again_lse(1),
      first_sums(static_cast<size_t>(routes)), first_entropy(1), first_lse(1);
  gpu().router_statistics(gprobs.data(), glse.data(), gchoice.data(), tokens, routes, again_counts.data(),
                          first_sums.data(), first_entropy.data(), first_lse.data());
  gpu().router_statistics(gprobs.data(), glse.data(), gchoice.data(), tokens, routes, again_counts.data(),
                          again_sums.data(), again_entropy.data(), again_lse.data());
  EXPECT_EQ(again_sums.host(), first_sums.host());
  EXPECT_EQ(again_entropy.host(), first_entropy.host());
  EXPECT_EQ(again_lse.host(), first_lse.host());
}

TEST_F(GpuRouting, RouterAuxBackwardAccumulates) {
  const int64_t tokens = 300, routes = 9;
  auto probs = random_values(size_t(tokens * routes), 8);
  for (float& p : probs) p = std::abs(p);
  const auto lse = random_values(size_t(tokens), 9, 4.0f), coef = random_values(size_t(routes), 10);
  std::vector<float> dlogits = random_values(probs.size(), 11);
  DeviceArray<float> gprobs(probs), glse(lse), gcoef(coef), gdlogits(dlogits);
  cpu().router_aux_backward(probs.data(), lse.data(), tokens, routes, coef.data(), 0.01f, dlogits.data());
  gpu().router_aux_backward(gprobs.data(), glse.data(), tokens, routes, gcoef.data(), 0.01f, gdlogits.data());
  // The same sums in the same order: equal but for a GPU's fused multiply-adds.
  EXPECT_TRUE(close(gdlogits.host(), dlogits, 1e-6, 1e-5));
}

struct GroupCase {
  int64_t tokens, experts;
};

void PrintTo(const GroupCase& c, std::ostream* os) {
  *os << c.tokens << " tokens, " << c.experts << " experts";
}

class GpuRoutingGroups : public GpuOpsTest, public testing::WithParamInterface<GroupCase> {};

TEST_P(GpuRoutingGroups, GroupByExpertIsTheCpusOrder) {
  const GroupCase c = GetParam();
  const auto choice = random_choices(c.tokens, c.experts, 3, uint64_t(12 + c.tokens + c.experts));
  // Filled alike on both sides: an entry one backend leaves unwritten shows.
  std::vector<int32_t> order(size_t(c.tokens), -7);
  std::vector<int64_t> offsets(size_t(c.experts + 1), -9);
  DeviceArray<int32_t> gchoice(choice), gorder(order);
  DeviceArray<int64_t> goffsets(offsets);
  cpu().group_by_expert(choice.data(), c.tokens, c.experts, order.data(), offsets.data());
  gpu().group_by_expert(gchoice.data(), c.tokens, c.experts, gorder.data(), goffsets.data());
  EXPECT_EQ(goffsets.host(), offsets);
  EXPECT_EQ(gorder.host(), order);
  // A permutation of the tokens: each expert's in increasing order, then the skip-routed ones.
  for (int64_t g = 0; g <= c.experts; ++g) {
    const int64_t end = g < c.experts ? offsets[size_t(g + 1)] : c.tokens;
    for (int64_t i = offsets[size_t(g)]; i < end; ++i) {
      ASSERT_EQ(choice[size_t(order[size_t(i)])], g) << i;
      if (i > offsets[size_t(g)]) {
        ASSERT_LT(order[size_t(i - 1)], order[size_t(i)]) << i;
      }
    }
  }
  if (c.experts > 3) {
    EXPECT_EQ(offsets[3], offsets[4]);  // the empty expert
  }
}

// More tokens than one block's tile (1024) in three cases; 256 experts, most with no tokens; none at all.
INSTANTIATE_TEST_SUITE_P(GpuOps, GpuRoutingGroups,
                         testing::Values(GroupCase{300, 8}, GroupCase{2500, 8}, GroupCase{1100, 256},
                                         GroupCase{2049, 1}, GroupCase{1, 4}, GroupCase{0, 4}),
                         [](const testing::TestParamInfo<GroupCase>& info) {
                           return "Tokens" + std::to_string(info.param.tokens) + "Experts" +
                                  std::to_string(info.param.experts);
                         });

TEST_F(GpuRouting, GatherScatterAndDot) {
  const int64_t tokens = 300, experts = 8, n = 70;
  const auto choice = random_choices(tokens, experts, 3, 20);
  std::vector<int32_t> order(static_cast<size_t>(tokens));
  std::vector<int64_t> offsets(size_t(experts + 1));
  cpu().group_by_expert(choice.data(), tokens, experts, order.data(), offsets.data());
  const int64_t count = offsets[size_t(experts)];  // fewer than tokens: the skip-routed are left out
  ASSERT_LT(count, tokens);
  const auto src = random_values(size_t(tokens * n), 21), scale = random_values(size_t(tokens), 22);
  DeviceArray<int32_t> gorder(order);
  DeviceArray<float> gsrc(src), gscale(scale);

  for (bool scaled : {true, false}) {
    const float* cpu_scale = scaled ? scale.data() : nullptr;
    const float* gpu_scale = scaled ? gscale.data() : nullptr;
    std::vector<float> gathered(size_t(count * n));
    DeviceArray<float> ggathered(gathered.size());
    cpu().gather_rows(src.data(), order.data(), cpu_scale, count, n, gathered.data());
    gpu().gather_rows(gsrc.data(), gorder.data(), gpu_scale, count, n, ggathered.data());
    EXPECT_TRUE(close(ggathered.host(), gathered, 0, 0));  // one product or a copy: exact

    // Scattered back (overwritten, then added to); rows of skip-routed tokens keep their values.
    std::vector<float> dst = random_values(src.size(), 23);
    DeviceArray<float> gdst(dst);
    for (bool accumulate : {false, true}) {
      cpu().scatter_rows(gathered.data(), order.data(), cpu_scale, count, n, accumulate, dst.data());
      gpu().scatter_rows(ggathered.data(), gorder.data(), gpu_scale, count, n, accumulate, gdst.data());
      // A product and an add: equal but for a GPU's fused multiply-add.
      EXPECT_TRUE(close(gdst.host(), dst, 1e-6, 1e-6))
          << "scaled " << scaled << ", accumulate " << accumulate;
    }
  }

  const auto b = random_values(size_t(count * n), 24);
  std::vector<float> dots(static_cast<size_t>(count));
  DeviceArray<float> gb(b), gdots(dots.size());
  cpu().gather_dot(src.data(), order.data(), b.data(), count, n, dots.data());
  gpu().gather_dot(gsrc.data(), gorder.data(), gb.data(), count, n, gdots.data());
  // 70 products summed in another order: a few ulps of the terms' magnitudes (each below 1).
  EXPECT_TRUE(close(gdots.host(), dots, 1e-5, 1e-5));
}

TEST_F(GpuRouting, SwigluForwardAndBackward) {
  const int64_t rows = 37, n = 50;
  const auto gate_up = random_values(size_t(rows * 2 * n), 25, 4.0f),
             dout = random_values(size_t(rows * n), 26);
  std::vector<float> out(size_t(rows * n)), dgate_up(gate_up.size());
  DeviceArray<float> ggate_up(gate_up), gdout(dout), gout(out.size()),
      gdgate_up(random_values(gate_up.size(), 27));
  cpu().swiglu_forward(gate_up.data(), rows, n, out.data());
  gpu().swiglu_forward(ggate_up.data(), rows, n, gout.data());
  // The same products; the sigmoid's exp differs by ulps.
  EXPECT_TRUE(close(gout.host(), out, 1e-6, 1e-5));
  cpu().swiglu_backward(gate_up.data(), dout.data(), rows, n, dgate_up.data());
  gpu().swiglu_backward(ggate_up.data(), gdout.data(), rows, n, gdgate_up.data());
  EXPECT_TRUE(close(gdgate_up.host(), dgate_up, 1e-6, 1e-5));
}

// Values in `ops`'s memory.
template <class T>
AlignedBuffer placed(Ops& ops, const std::vector<T>& values) {
  AlignedBuffer buffer(values.size() * sizeof(T), ops.memory());
  ops.copy_from_host(buffer.data(), values.data(), buffer.size());
  return buffer;
}

// write(dst) runs an op into a Destination of `count` values, once f32 and once bf16: the bf16 bits must be
// the f32 values rounded to nearest even, exactly (the op rounds as it writes, what a pass after it gave).
template <class Write>
testing::AssertionResult rounded_as_written(Ops& ops, int64_t count, const Write& write) {
  AlignedBuffer f32(size_t(count) * sizeof(float), ops.memory()),
      bf16(size_t(count) * sizeof(BFloat16), ops.memory());
  write(Destination(f32.as<float>()));
  write(Destination(bf16.as<BFloat16>()));
  std::vector<float> values(static_cast<size_t>(count));
  std::vector<BFloat16> rounded(static_cast<size_t>(count));
  ops.read_to_host(values.data(), f32.data(), f32.size());
  ops.read_to_host(rounded.data(), bf16.data(), bf16.size());
  for (size_t i = 0; i < values.size(); ++i) {
    if (rounded[i].bits != f32_to_bf16(values[i])) {
      return testing::AssertionFailure()
             << "element " << i << ": f32 " << values[i] << ", bf16 " << bf16_to_f32(rounded[i].bits);
    }
  }
  return testing::AssertionSuccess();
}

// The ops that write a bf16 run's activations, on either backend. Rows of 50: not a multiple of the CPU's
// 8-lane blocks.
TEST_F(GpuRouting, Bf16DestinationsHoldTheRoundedF32Outputs) {
  const int64_t rows = 37, n = 50;
  const auto x = random_values(size_t(rows * 2 * n), 28, 4.0f), dout = random_values(size_t(rows * n), 29),
             weight = random_values(size_t(n), 30), scale = random_values(size_t(rows), 31);
  std::vector<int32_t> order(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) order[size_t(i)] = int32_t((i * 11) % rows);  // a permutation
  std::vector<float> mask(static_cast<size_t>(rows), 1.0f);
  for (size_t r = 0; r < mask.size(); r += 3) mask[r] = 0.0f;
  for (Ops* ops : {&cpu(), &gpu()}) {
    const char* side = ops == &cpu() ? "CPU" : "GPU";
    AlignedBuffer px = placed(*ops, x), pdout = placed(*ops, dout), pweight = placed(*ops, weight),
                  pscale = placed(*ops, scale), porder = placed(*ops, order), pmask = placed(*ops, mask),
                  rstd(size_t(rows) * sizeof(float), ops->memory());
    const float* in = px.as<float>();
    EXPECT_TRUE(rounded_as_written(*ops, rows * n,
                                   [&](Destination y) {
                                     ops->rmsnorm_forward(in, pweight.as<float>(), rows, n, 1e-5f, y,
                                                          rstd.as<float>());
                                   }))
        << "rmsnorm_forward, " << side;
    EXPECT_TRUE(rounded_as_written(*ops, rows * n,
                                   [&](Destination y) {
                                     ops->rmsnorm_forward(in, pweight.as<float>(), rows, n, 1e-5f, y,
                                                          rstd.as<float>());
                                     ops->mask_rows(y, rows, n, pmask.as<float>());
                                   }))
        << "mask_rows, " << side;
    for (const float* gate :
         {static_cast<const float*>(nullptr), static_cast<const float*>(pscale.as<float>())}) {
      EXPECT_TRUE(rounded_as_written(
          *ops, rows * n,
          [&](Destination dst) { ops->gather_rows(in, porder.as<int32_t>(), gate, rows, n, dst); }))
          << "gather_rows, " << side << (gate ? ", scaled" : "");
    }
    EXPECT_TRUE(
        rounded_as_written(*ops, rows * n, [&](Destination out) { ops->swiglu_forward(in, rows, n, out); }))
        << "swiglu_forward, " << side;
    EXPECT_TRUE(rounded_as_written(
        *ops, rows * 2 * n,
        [&](Destination dgate_up) { ops->swiglu_backward(in, pdout.as<float>(), rows, n, dgate_up); }))
        << "swiglu_backward, " << side;
  }
}

// Labels for the loss: random, with some rows ignored (-100) and the first and last classes used.
std::vector<int32_t> loss_labels(int64_t rows, int64_t vocab, uint64_t seed) {
  std::mt19937_64 engine(seed);
  std::vector<int32_t> labels(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) labels[size_t(r)] = int32_t(engine() % uint64_t(vocab));
  if (rows > 5) {
    labels[1] = -100;
    labels[4] = -100;
    labels[2] = 0;
    labels[3] = int32_t(vocab - 1);
  }
  return labels;
}

// Each row's loss is max + log(sum of exp(z - max)), the sum in f32: the GPU's one pass (each thread's sum
// rescaled as its max grows, then a tree) and the CPU's 8-lane loop after the max round it differently (about
// 1e-6 relative, with the ulps of exp), so the loss may differ by ~1e-6 per row, bounded here by 1e-5. The
// gradient exp(z - lse) inherits that lse difference: 1e-5 relative, with 1e-9 absolute for the values near
// zero.
constexpr double kRowLossTolerance = 1e-5;

TEST_F(GpuLoss, CrossEntropyWithIgnoredRowsAndAliasing) {
  const int64_t rows = 24, vocab = 1000;
  const float grad_scale = 0.25f;
  const auto logits = random_values(size_t(rows * vocab), 30, 5.0f);
  const auto labels = loss_labels(rows, vocab, 31);
  DeviceArray<float> glogits(logits), gdlogits(random_values(logits.size(), 32));
  DeviceArray<int32_t> glabels(labels);
  std::vector<double> loss{1.5};
  DeviceArray<double> gloss(loss);
  std::vector<float> dlogits(logits.size());

  // With a separate gradient, overwritten (ignored rows to zero).
  cpu().cross_entropy(logits.data(), labels.data(), rows, vocab, grad_scale, dlogits.data(), nullptr,
                      loss.data());
  gpu().cross_entropy(glogits.data(), glabels.data(), rows, vocab, grad_scale, gdlogits.data(), nullptr,
                      gloss.data());
  const auto got = gdlogits.host();
  EXPECT_TRUE(close(got, dlogits, 1e-9, 1e-5));
  for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(got[size_t(vocab + j)], 0.0f);  // row 1 is ignored
  EXPECT_NEAR(gloss.host()[0], loss[0], kRowLossTolerance * rows);

  // The loss alone, added to the same sum.
  cpu().cross_entropy(logits.data(), labels.data(), rows, vocab, grad_scale, nullptr, nullptr, loss.data());
  gpu().cross_entropy(glogits.data(), glabels.data(), rows, vocab, grad_scale, nullptr, nullptr,
                      gloss.data());
  EXPECT_NEAR(gloss.host()[0], loss[0], kRowLossTolerance * rows);

  // The gradient written over the logits themselves.
  std::vector<float> in_place = logits;
  cpu().cross_entropy(in_place.data(), labels.data(), rows, vocab, grad_scale, in_place.data(), nullptr,
                      loss.data());
  gpu().cross_entropy(glogits.data(), glabels.data(), rows, vocab, grad_scale, glogits.data(), nullptr,
                      gloss.data());
  EXPECT_TRUE(close(glogits.host(), in_place, 1e-9, 1e-5));
  EXPECT_TRUE(close(glogits.host(), dlogits, 1e-9, 1e-5));  // the same gradient as written apart
  EXPECT_NEAR(gloss.host()[0], loss[0], kRowLossTolerance * rows);
}

TEST_F(GpuLoss, LongRowsRepeatExactly) {
  // Rows ten times the block's width, with large logits (the max shift matters).
  const int64_t rows = 3, vocab = 5000;
  const auto logits = random_values(size_t(rows * vocab), 33, 30.0f);
  const auto labels = loss_labels(rows, vocab, 34);
  std::vector<float> dlogits(logits.size());
  std::vector<double> loss{0.0};
  DeviceArray<float> glogits(logits), gdlogits(logits.size());
  DeviceArray<int32_t> glabels(labels);
  DeviceArray<double> gloss(loss), gloss_again(loss);
  cpu().cross_entropy(logits.data(), labels.data(), rows, vocab, 1.0f, dlogits.data(), nullptr, loss.data());
  gpu().cross_entropy(glogits.data(), glabels.data(), rows, vocab, 1.0f, gdlogits.data(), nullptr,
                      gloss.data());
  EXPECT_TRUE(close(gdlogits.host(), dlogits, 1e-9, 1e-5));
  EXPECT_NEAR(gloss.host()[0], loss[0], kRowLossTolerance * rows);
  gpu().cross_entropy(glogits.data(), glabels.data(), rows, vocab, 1.0f, nullptr, nullptr,
                      gloss_again.data());
  EXPECT_EQ(gloss_again.host()[0], gloss.host()[0]);  // a fixed order of sums, no atomics
}

// The bf16 gradient (what a bf16 step's head reads) is the f32 gradient rounded: bit for bit the GPU's own
// f32 gradient, with or without it, and within a bf16 ulp of the CPU's rounded gradient (the f32 values
// differ by ~1e-5 relative, so a value near a rounding tie may round the other way).
TEST_F(GpuLoss, Bf16GradientIsTheF32OneRounded) {
  const int64_t rows = 12, vocab = 3000;
  const float grad_scale = 0.5f;
  const auto logits = random_values(size_t(rows * vocab), 35, 8.0f);
  const auto labels = loss_labels(rows, vocab, 36);
  DeviceArray<float> glogits(logits), gdlogits(logits.size());
  DeviceArray<BFloat16> gboth(logits.size()), galone(logits.size());
  DeviceArray<int32_t> glabels(labels);
  DeviceArray<double> gloss(std::vector<double>{0.0}), gloss_alone(std::vector<double>{0.0});
  gpu().cross_entropy(glogits.data(), glabels.data(), rows, vocab, grad_scale, gdlogits.data(), gboth.data(),
                      gloss.data());
  gpu().cross_entropy(glogits.data(), glabels.data(), rows, vocab, grad_scale, nullptr, galone.data(),
                      gloss_alone.data());
  EXPECT_EQ(gloss_alone.host()[0], gloss.host()[0]);
  std::vector<BFloat16> cpu_rounded(logits.size());
  std::vector<double> loss{0.0};
  cpu().cross_entropy(logits.data(), labels.data(), rows, vocab, grad_scale, nullptr, cpu_rounded.data(),
                      loss.data());
  const std::vector<float> f32 = gdlogits.host();
  const std::vector<BFloat16> both = gboth.host(), alone = galone.host();
  for (size_t i = 0; i < f32.size(); ++i) {
    ASSERT_EQ(both[i].bits, f32_to_bf16(f32[i])) << i;
    ASSERT_EQ(alone[i].bits, both[i].bits) << i;
    const float gpu_value = bf16_to_f32(both[i].bits), cpu_value = bf16_to_f32(cpu_rounded[i].bits);
    ASSERT_LE(std::abs(gpu_value - cpu_value), std::abs(cpu_value) / 128 + 1e-30f) << i;
  }
}

}  // namespace
}  // namespace zaya::test
