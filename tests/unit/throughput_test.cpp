// The figures a run reports about the machine and the choices it makes from them: the MFU denominator
// (GemmRate), and precision "auto" decided from measured rates.

#include <gtest/gtest.h>

#include <vector>

#include "backend/devices.h"
#include "backend/ops.h"
#include "backend/precision_policy.h"
#include "backend/throughput.h"
#include "core/error.h"
#include "model/model_dims.h"

namespace zaya {
namespace {

// Measurements read from a list, as a machine would give them (the last one repeated).
struct Measurements {
  std::vector<double> values;
  size_t next = 0;
  double operator()() { return values[std::min(next++, values.size() - 1)]; }
};

GemmRate rate_from(Measurements& m) {
  return GemmRate([&m] { return m(); }, "test");
}

TEST(GemmRate, MeasuresAtStartUntilARoundNoLongerRaisesIt) {
  // A busy start (100), then the machine's rate: rounds go on while they raise it by more than 2%.
  Measurements m{{100, 150, 200, 203, 500}};
  const GemmRate rate = rate_from(m);
  EXPECT_EQ(rate.flops(), 203);
  EXPECT_EQ(m.next, 4u);  // 203 raised 200 by 1.5%: settled
  EXPECT_NE(rate.describe().find("the best of 4 measurements"), std::string::npos) << rate.describe();
}

TEST(GemmRate, IsNeverLowered) {
  Measurements m{{300, 300, 120}};
  GemmRate rate = rate_from(m);
  EXPECT_FALSE(rate.remeasure());  // a busy moment reads 120
  EXPECT_EQ(rate.flops(), 300);
}

TEST(GemmRate, AnMfuAboveOneMeasuresAgainAndIsNeverShownAboveOne) {
  // Measured while busy: 100 at start. A step that did 150 measures again: the quiet machine gives 400.
  Measurements m{{100, 100, 400}};
  GemmRate rate = rate_from(m);
  bool raised = false;
  EXPECT_DOUBLE_EQ(rate.mfu(150, &raised), 150.0 / 400);
  EXPECT_TRUE(raised);
  // A step below the rate measures nothing.
  const size_t measured = m.next;
  EXPECT_DOUBLE_EQ(rate.mfu(200, &raised), 0.5);
  EXPECT_FALSE(raised);
  EXPECT_EQ(m.next, measured);
  // Where the measurement falls short again (still busy), the step's own rate is the machine's: MFU 1.
  Measurements busy{{100, 100, 110}};
  GemmRate low = rate_from(busy);
  EXPECT_DOUBLE_EQ(low.mfu(180, &raised), 1.0);
  EXPECT_TRUE(raised);
  EXPECT_EQ(low.flops(), 180);
}

TEST(GemmRate, MeasuresTheBackendsProducts) {
  const GemmRate rate = gemm_rate(cpu_ops(), Precision::F32, 1);
  EXPECT_GT(rate.flops(), 1e8);  // any CPU multiplies faster than 0.1 GFLOP/s
  EXPECT_NE(rate.describe().find("sgemm 1024^3 on 1 thread"), std::string::npos) << rate.describe();
}

// The decision from the rates alone: an Intel Xeon without AMX (bf16 at half its sgemm's rate), and a
// Zen 4 (bf16 at twice it), with the margin's edge.
TEST(PrecisionAuto, ChoosesBf16OnlyWhereItIsClearlyFaster) {
  EXPECT_EQ(choose_precision({327e9, 168e9}), Precision::F32);
  EXPECT_EQ(choose_precision({220e9, 440e9}), Precision::BF16);
  EXPECT_EQ(choose_precision({100e9, 119e9}),
            Precision::F32);  // within the margin: the noise of a busy start
  EXPECT_EQ(choose_precision({100e9, 120e9}), Precision::BF16);
  EXPECT_EQ(choose_precision({100e9, 0}), Precision::F32);  // no bf16 products at all
}

TEST(PrecisionAuto, MeasuresTheModelsProductsAndSaysWhy) {
  const ModelDims dims = model_dims(preset_config("tiny"));
  const std::vector<ProductShape> shapes = dominant_products(dims, 256);
  ASSERT_EQ(shapes.size(), 3u);
  EXPECT_EQ(shapes[0].n, 2 * dims.intermediate);  // an expert's gate and up projection
  EXPECT_EQ(shapes[2].n, dims.vocab);             // the head (the tiny vocabulary is whole)
  const PrecisionRates rates = measure_precision_rates(cpu_ops(), shapes, 0.05);
  EXPECT_GT(rates.fp32, 0);
  const PrecisionChoice choice = resolve_precision("auto", select_device("cpu", "--device"), shapes);
  EXPECT_NE(choice.description.find("auto, measured"), std::string::npos) << choice.description;
  EXPECT_NE(choice.description.find(std::string(precision_name(choice.precision))), std::string::npos);
  // A setting by name is taken as it is, measuring nothing.
  EXPECT_EQ(resolve_precision("fp32", select_device("cpu", "--device"), {}).precision, Precision::F32);
  EXPECT_THROW(resolve_precision("fp16", select_device("cpu", "--device"), {}), Error);
}

}  // namespace
}  // namespace zaya
