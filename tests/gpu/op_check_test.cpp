// check_ops (backend/op_check.h), what `zaya bench ops` prints: every op of the table, on the GPU backend
// (the emulator here, a GPU in the gpu-labelled build) against the CPU backend at the tiny preset's shapes.
//
// Bounds, on each op's largest error relative to its output's largest value on the CPU:
//   f32: the backends differ only in the order of their f32 sums (and the ulps of exp and a GPU's fused
//   multiply-adds); over the tiny shapes' sums of at most a few hundred terms that is a few f32 ulps of
//   the partial sums against the output's largest value: 1e-4. Integer outputs (choices, orders, offsets,
//   counts) must be equal, and an integer that differs is an error of at least 1 against values below the
//   token count (140): at least 7e-3, far past the bound.
//   bf16 (the products, grouped or not, the attention, Newton-Schulz and the loss's gradient, and the ops
//   that write a bf16 run's activations in bf16: RMSNorm, the row mask and gather, SwiGLU both ways; every
//   other op is f32 whatever the precision): both sides round the same f32 values to bf16, but a value
//   within an f32 ulp of a rounding tie may round the other way, one bf16 ulp (2^-8) of itself; a few such
//   flips summed in a product stay within 4 * 2^-8 of the output's scale (the bound of the GPU tests that
//   check these ops alone). Newton-Schulz in bf16 carries its flips through five steps that amplify them, and
//   its output is an orthogonalised matrix: its scale is its singular values (about 1), not its largest entry
//   (0.25 here), so its bound is 4 * 2^-8 absolute. Seen: 7.1e-3 (2.9e-2 of the largest entry), while the
//   CPU's own bf16 result differs from its f32 one by 9.9e-3 (optimizer_test holds the GPU to the CPU's bf16
//   accuracy).
// The CPU against itself runs the same code on the same inputs: every error exactly 0.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>

#include "backend/op_check.h"
#include "backend/ops.h"
#include "gpu/gpu_test_util.h"
#include "model/model_dims.h"

namespace zaya::test {
namespace {

using OpCheck = GpuOpsTest;

constexpr double kF32Bound = 1e-4;
constexpr double kBf16Bound = 4.0 / 256;

// The tiny preset with 2 sequences of 70 tokens: longer than its sliding window of 64 (so the window cuts
// in), and a second sequence whose padded keys leave rows that see no key.
OpCheckShape tiny_shape() {
  return op_check_shape(model_dims(preset_config("tiny")), 2, 70);
}

bool precision_dependent(const std::string& op) {
  return op == "gemm" || op == "grouped_gemm" || op == "grouped_weight_gradient" ||
         op == "attention_forward" || op == "attention_backward" || op == "newton_schulz" ||
         op == "cross_entropy" || op == "rmsnorm_forward" || op == "mask_rows" || op == "gather_rows" ||
         op == "swiglu_forward" || op == "swiglu_backward";
}

// Every op of the table reported, and nothing else.
void expect_every_op(const std::vector<OpCheckResult>& results) {
  std::set<std::string> reported;
  for (const OpCheckResult& r : results) reported.insert(r.op);
  const std::set<std::string> table(kOpNames.begin(), kOpNames.end());
  EXPECT_EQ(reported, table);
}

void expect_within_bounds(Precision precision) {
  OpCheckOptions options;
  options.precision = precision;
  options.repeats = 1;  // the emulator is slow; its times mean nothing anyway
  const auto start = std::chrono::steady_clock::now();
  const std::vector<OpCheckResult> results = check_ops(tiny_shape(), cpu_ops(), gpu::ops(), options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  expect_every_op(results);
  for (const OpCheckResult& r : results) {
    const bool bf16 = precision == Precision::BF16 && precision_dependent(r.op);
    if (bf16 && r.op == "newton_schulz") {
      EXPECT_LE(r.abs_error, kBf16Bound) << r.call;
    } else {
      EXPECT_LE(r.rel_error, bf16 ? kBf16Bound : kF32Bound)
          << r.op << " (" << r.call << "): " << r.worst_output << " off by " << r.abs_error;
    }
    EXPECT_GT(r.device_seconds, 0) << r.op;
    EXPECT_GT(r.reference_seconds, 0) << r.op;
  }
  // The grouping is exact by contract (a stable counting sort): its order and offsets are equal.
  for (const OpCheckResult& r : results) {
    if (r.op == "group_by_expert") {
      EXPECT_EQ(r.abs_error, 0) << r.call;
    }
  }
  // The largest error seen, for the log: how close to its bound the backend comes.
  const OpCheckResult& worst = *std::max_element(
      results.begin(), results.end(),
      [](const OpCheckResult& a, const OpCheckResult& b) { return a.rel_error < b.rel_error; });
  std::printf("%s: largest relative error %.3g (%s, %s: %s), %zu calls in %.1f s\n",
              std::string(precision_name(precision)).c_str(), worst.rel_error, worst.op.c_str(),
              worst.call.c_str(), worst.worst_output.c_str(), results.size(), seconds);
}

TEST_F(OpCheck, EveryOpMatchesTheCpuInF32) {
  expect_within_bounds(Precision::F32);
}

TEST_F(OpCheck, EveryOpMatchesTheCpuInBf16) {
  expect_within_bounds(Precision::BF16);
}

// The CPU against itself: the same code on the same inputs gives the same bits, so every error is 0 (and
// the check itself hands both sides the same starting values, the accumulated ones included).
TEST(OpCheckCpu, TheCpuAgainstItselfIsExact) {
  for (const Precision precision : {Precision::F32, Precision::BF16}) {
    OpCheckOptions options;
    options.precision = precision;
    options.repeats = 1;
    const std::vector<OpCheckResult> results = check_ops(tiny_shape(), cpu_ops(), cpu_ops(), options);
    expect_every_op(results);
    for (const OpCheckResult& r : results) {
      EXPECT_EQ(r.abs_error, 0) << r.op << " (" << r.call << "), " << std::string(precision_name(precision));
      EXPECT_EQ(r.rel_error, 0) << r.op << " (" << r.call << ")";
    }
  }
}

}  // namespace
}  // namespace zaya::test
