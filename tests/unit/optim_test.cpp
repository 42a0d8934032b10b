// The optimizer's parts on their own: Newton-Schulz, schedules, the batch ramp, parameter groups, the
// balancing controller, and exact gradient accumulation.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "backend/ops.h"
#include "core/error.h"
#include "core/precision.h"
#include "core/rng.h"
#include "core/threads.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "model/model_io.h"
#include "optim/balancing.h"
#include "optim/batch_ramp.h"
#include "optim/optimizer.h"
#include "optim/optimizer_shards.h"
#include "optim/param_groups.h"
#include "optim/schedule.h"
#include "train/gradient_reducer.h"
#include "train/train_step.h"
#include "unit/reference_data.h"
#include "unit/test_util.h"

namespace zaya {
namespace {

using Matrix = std::vector<double>;  // row-major

Matrix random_orthonormal_columns(int64_t rows, int64_t cols, uint64_t stream) {
  // Gram-Schmidt on Gaussian columns: [rows, cols] with orthonormal columns (cols <= rows).
  const RandomStream rng(9, RngPurpose::Test, stream);
  Matrix q(size_t(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) q[size_t(i)] = rng.normal(uint64_t(i));
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t prev = 0; prev < c; ++prev) {
      double dot = 0;
      for (int64_t r = 0; r < rows; ++r) dot += q[size_t(r * cols + c)] * q[size_t(r * cols + prev)];
      for (int64_t r = 0; r < rows; ++r) q[size_t(r * cols + c)] -= dot * q[size_t(r * cols + prev)];
    }
    double norm = 0;
    for (int64_t r = 0; r < rows; ++r) norm += q[size_t(r * cols + c)] * q[size_t(r * cols + c)];
    for (int64_t r = 0; r < rows; ++r) q[size_t(r * cols + c)] /= std::sqrt(norm);
  }
  return q;
}

// U diag(sigma) V^T with random orthonormal U [rows, k], V [cols, k].
std::vector<float> with_singular_values(int64_t rows, int64_t cols, const std::vector<double>& sigma) {
  const int64_t k = int64_t(sigma.size());
  const Matrix u = random_orthonormal_columns(rows, k, 1), v = random_orthonormal_columns(cols, k, 2);
  std::vector<float> out(size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      double sum = 0;
      for (int64_t s = 0; s < k; ++s) sum += u[size_t(i * k + s)] * sigma[size_t(s)] * v[size_t(j * k + s)];
      out[size_t(i * cols + j)] = float(sum);
    }
  }
  return out;
}

// Singular values, largest first: square roots of the eigenvalues of the Gram matrix of the narrow side
// (cyclic Jacobi).
std::vector<double> singular_values(const std::vector<float>& x, int64_t rows, int64_t cols) {
  const bool tall = rows > cols;
  const int64_t n = tall ? cols : rows, m = tall ? rows : cols;
  auto at = [&](int64_t i, int64_t k) {
    return double(tall ? x[size_t(k * cols + i)] : x[size_t(i * cols + k)]);
  };
  Matrix a(size_t(n * n));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t k = 0; k < m; ++k) sum += at(i, k) * at(j, k);
      a[size_t(i * n + j)] = sum;
    }
  }
  for (int sweep = 0; sweep < 60; ++sweep) {
    for (int64_t p = 0; p < n; ++p) {
      for (int64_t q = p + 1; q < n; ++q) {
        const double apq = a[size_t(p * n + q)];
        if (std::abs(apq) < 1e-15) continue;
        const double theta = (a[size_t(q * n + q)] - a[size_t(p * n + p)]) / (2 * apq);
        const double t = (theta >= 0 ? 1 : -1) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int64_t k = 0; k < n; ++k) {
          const double akp = a[size_t(k * n + p)], akq = a[size_t(k * n + q)];
          a[size_t(k * n + p)] = c * akp - s * akq;
          a[size_t(k * n + q)] = s * akp + c * akq;
        }
        for (int64_t k = 0; k < n; ++k) {
          const double apk = a[size_t(p * n + k)], aqk = a[size_t(q * n + k)];
          a[size_t(p * n + k)] = c * apk - s * aqk;
          a[size_t(q * n + k)] = s * apk + c * aqk;
        }
      }
    }
  }
  std::vector<double> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(std::sqrt(std::max(0.0, a[size_t(i * n + i)])));
  std::sort(out.rbegin(), out.rend());
  return out;
}

constexpr float kQuintic[3] = {3.4445f, -4.7750f, 2.0315f};

std::vector<double> orthogonalised(std::vector<float> x, int64_t rows, int64_t cols,
                                   Precision precision = Precision::F32) {
  cpu_ops().newton_schulz(precision, x.data(), 1, rows, cols, 5, kQuintic);
  return singular_values(x, rows, cols);
}

struct NsCase {
  const char* name;
  int64_t rows, cols;
  std::vector<double> sigma;  // the input's nonzero singular values; min(rows, cols) - size of them are 0
};

class NewtonSchulz : public ::testing::TestWithParam<NsCase> {};

// The quintic maps every nonzero singular value into about [0.7, 1.2] in five steps (it does not converge
// to 1; that is the point of its coefficients) and keeps zero singular values at zero.
TEST_P(NewtonSchulz, SingularValuesLandInTheQuinticBand) {
  const NsCase& c = GetParam();
  const std::vector<double> out =
      orthogonalised(with_singular_values(c.rows, c.cols, c.sigma), c.rows, c.cols);
  for (size_t i = 0; i < out.size(); ++i) {
    if (i < c.sigma.size()) {
      EXPECT_GE(out[i], 0.65) << c.name << " singular value " << i;
      EXPECT_LE(out[i], 1.2) << c.name << " singular value " << i;
    } else {
      EXPECT_LE(out[i], 1e-3) << c.name << " should stay rank-deficient";
    }
  }
}

// In bf16 the band holds for full-rank inputs; a rank-deficient one does not stay so (rounding X puts
// ~u |X| into the null space, and the quintic's slope 3.44 at zero grows it 3.44^5 ~ 500-fold, as in the
// reference Muon), so only full-rank inputs are taken.
class NewtonSchulzBf16 : public ::testing::TestWithParam<NsCase> {};

TEST_P(NewtonSchulzBf16, FullRankSingularValuesLandInTheBand) {
  const NsCase& c = GetParam();
  const std::vector<double> out =
      orthogonalised(with_singular_values(c.rows, c.cols, c.sigma), c.rows, c.cols, Precision::BF16);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_GE(out[i], 0.65) << c.name << " singular value " << i;
    EXPECT_LE(out[i], 1.2) << c.name << " singular value " << i;
  }
}

std::vector<double> log_spaced(int count, double largest, double smallest) {
  std::vector<double> out;
  for (int i = 0; i < count; ++i)
    out.push_back(largest * std::pow(smallest / largest, double(i) / (count - 1)));
  return out;
}

std::vector<NsCase> ns_cases(bool full_rank_only) {
  std::vector<NsCase> cases = {{"square, spread 1..0.5", 32, 32, log_spaced(32, 1.0, 0.5)},
                               {"wide, random scale", 16, 48, log_spaced(16, 37.0, 9.0)},
                               {"tall, ill-conditioned (100)", 48, 24, log_spaced(24, 5.0, 0.05)},
                               {"wide, ill-conditioned (100)", 20, 40, log_spaced(20, 1.0, 0.01)},
                               {"tall, rank 8 of 24", 40, 24, log_spaced(8, 2.0, 0.5)},
                               {"square, rank 5", 24, 24, log_spaced(5, 1.0, 0.2)}};
  if (full_rank_only) {
    std::erase_if(cases, [](const NsCase& c) { return int64_t(c.sigma.size()) < std::min(c.rows, c.cols); });
  }
  return cases;
}

const auto kCaseName = [](const auto& info) { return "case" + std::to_string(info.index); };
INSTANTIATE_TEST_SUITE_P(Inputs, NewtonSchulz, ::testing::ValuesIn(ns_cases(false)), kCaseName);
INSTANTIATE_TEST_SUITE_P(Inputs, NewtonSchulzBf16, ::testing::ValuesIn(ns_cases(true)), kCaseName);

// A batch of an expert layer's shape (tall and wide, with rows > 256 so that bf16 products pad k, and a
// Gram matrix of more than one symmetric block): each matrix of the batch, run concurrently on the threads,
// gives the bits it gives alone in a batch run on one thread, and stays near the f32 result. Bound: each
// product reads operands rounded with relative error u = 2^-8, and the quintic's slope is at most
// |a| = 3.44, so five steps of three products bound the relative error by 5 * 3 * 2u * 3.44 ~ 0.4 in the
// worst case; these spectra measure 0.016 (~4u), and 0.05 (~13u) is asserted.
TEST(NewtonSchulzBatch, Bf16BatchIsEachMatrixAloneAndNearF32) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{300, 96}, {64, 272}, {301, 270}}) {
    constexpr int64_t kCount = 5;
    std::vector<float> batch;
    for (int64_t e = 0; e < kCount; ++e) {
      const std::vector<float> one =
          with_singular_values(rows, cols, log_spaced(int(std::min(rows, cols)), 2.0 + e, 0.2));
      batch.insert(batch.end(), one.begin(), one.end());
    }
    std::vector<float> f32 = batch, bf16 = batch, serial = batch;
    cpu_ops().newton_schulz(Precision::F32, f32.data(), kCount, rows, cols, 5, kQuintic);
    cpu_ops().newton_schulz(Precision::BF16, bf16.data(), kCount, rows, cols, 5, kQuintic);
    const int threads = num_threads();
    set_num_threads(1);
    cpu_ops().newton_schulz(Precision::BF16, serial.data(), kCount, rows, cols, 5, kQuintic);
    set_num_threads(threads);
    EXPECT_EQ(0, std::memcmp(bf16.data(), serial.data(), bf16.size() * sizeof(float))) << rows << "x" << cols;
    EXPECT_LT(test::relative_error(bf16, f32), 0.05) << rows << "x" << cols;
    EXPECT_GT(test::relative_error(bf16, f32), 0.0) << "the bf16 products were not taken";
  }
}

// The quintic iteration in double, as the backend runs it: on the wide orientation X [r, c], r <= c, scaled
// to unit Frobenius norm (plus 1e-7); A = X X^T; B = b A + c A A; X <- a X + B X.
std::vector<float> newton_schulz_in_double(const std::vector<float>& x, int64_t rows, int64_t cols) {
  const bool tall = rows > cols;
  const int64_t r = std::min(rows, cols), c = std::max(rows, cols);
  Matrix current(size_t(r * c));
  double norm = 0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const double value = x[size_t(i * cols + j)];
      current[size_t(tall ? j * c + i : i * c + j)] = value;
      norm += value * value;
    }
  }
  for (double& value : current) value /= std::sqrt(norm) + 1e-7;
  // out [n, m] += alpha left [n, k] right [k, m], loops ordered for rows in cache.
  auto product = [](const Matrix& left, const Matrix& right, int64_t n, int64_t k, int64_t m, double alpha,
                    Matrix& out) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t p = 0; p < k; ++p) {
        const double scale = alpha * left[size_t(i * k + p)];
        for (int64_t j = 0; j < m; ++j) out[size_t(i * m + j)] += scale * right[size_t(p * m + j)];
      }
    }
  };
  Matrix transposed(size_t(c * r));
  for (int step = 0; step < 5; ++step) {
    for (int64_t i = 0; i < r; ++i) {
      for (int64_t j = 0; j < c; ++j) transposed[size_t(j * r + i)] = current[size_t(i * c + j)];
    }
    Matrix a(size_t(r * r), 0.0);
    product(current, transposed, r, c, r, 1.0, a);
    Matrix b = a;
    for (double& value : b) value *= kQuintic[1];
    product(a, a, r, r, r, kQuintic[2], b);
    Matrix next = current;
    for (double& value : next) value *= kQuintic[0];
    product(b, current, r, r, c, 1.0, next);
    current = std::move(next);
  }
  std::vector<float> out(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j)
      out[size_t(i * cols + j)] = float(current[size_t(tall ? j * c + i : i * c + j)]);
  }
  return out;
}

// With more than 256 rows in the Gram matrix, the backend multiplies only the row blocks of A = X X^T and of
// A A on and above the diagonal and mirrors the rest (and transposes a tall matrix in tiles): in f32 the
// result must still be the iteration's, in both orientations and with sizes that are not multiples of the
// blocks. Bound: the f32 products differ from exact ones by ~sqrt(c) u |X|^2 with u = 6e-8, and five steps
// of slope at most 3.44 grow that at most 3.44^5 ~ 480-fold in the smallest singular directions; over a
// spectrum of 1..0.1 that stays under 1e-5 relative (1.8e-6 is measured, as with whole products). One
// column of each block left unmirrored measures 0.055.
TEST(NewtonSchulz, F32MatchesTheIterationInDoubleAcrossSymmetricBlocks) {
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{270, 301}, {301, 270}}) {
    const std::vector<float> x = with_singular_values(rows, cols, log_spaced(270, 1.0, 0.1));
    std::vector<float> got = x;
    cpu_ops().newton_schulz(Precision::F32, got.data(), 1, rows, cols, 5, kQuintic);
    EXPECT_LT(test::relative_error(got, newton_schulz_in_double(x, rows, cols)), 1e-5) << rows << "x" << cols;
  }
}

TEST(Schedule, WarmupThenEachShape) {
  ScheduleConfig wsd{ScheduleKind::Wsd, 100, 0.2, DecayShape::Linear, 0.1};
  EXPECT_DOUBLE_EQ(lr_multiplier(wsd, 50, 1000), 0.5);
  EXPECT_DOUBLE_EQ(lr_multiplier(wsd, 100, 1000), 1.0);
  EXPECT_DOUBLE_EQ(lr_multiplier(wsd, 800, 1000), 1.0);
  EXPECT_NEAR(lr_multiplier(wsd, 900, 1000), 0.55, 1e-12);
  EXPECT_NEAR(lr_multiplier(wsd, 1000, 1000), 0.1, 1e-12);
  wsd.decay_shape = DecayShape::Sqrt;
  EXPECT_NEAR(lr_multiplier(wsd, 850, 1000), 0.1 + 0.9 * (1 - std::sqrt(0.25)), 1e-12);
  wsd.decay_shape = DecayShape::Cosine;
  EXPECT_NEAR(lr_multiplier(wsd, 900, 1000), 0.55, 1e-12);
  const ScheduleConfig cosine{ScheduleKind::Cosine, 100, 0, DecayShape::Linear, 0.0};
  EXPECT_NEAR(lr_multiplier(cosine, 550, 1000), 0.5, 1e-12);
  EXPECT_NEAR(lr_multiplier(cosine, 1000, 1000), 0.0, 1e-12);
  const ScheduleConfig constant{ScheduleKind::Constant, 10, 0, DecayShape::Linear, 0.0};
  EXPECT_DOUBLE_EQ(lr_multiplier(constant, 5, 1000), 0.5);
  EXPECT_DOUBLE_EQ(lr_multiplier(constant, 999, 1000), 1.0);
  EXPECT_THROW(parse_schedule_kind("linear"), Error);
  EXPECT_THROW(parse_decay_shape("exp"), Error);
}

TEST(BatchRamp, GrowsInWholeMicroBatchesPerRank) {
  const BatchRamp ramp({4, 8, 64, 1000, true}, 2);  // unit 8 sequences
  EXPECT_EQ(ramp.global_sequences(0), 8);
  EXPECT_EQ(ramp.global_sequences(500), 32);  // 8 + 0.5 * 56 = 36 -> 32
  EXPECT_EQ(ramp.global_sequences(999), 64 - 8);
  EXPECT_EQ(ramp.global_sequences(1000), 64);
  int64_t previous = 0;
  for (int64_t t = 0; t <= 1200; t += 7) {
    const int64_t size = ramp.global_sequences(t);
    EXPECT_EQ(size % 8, 0);
    EXPECT_GE(size, previous);
    previous = size;
  }
  EXPECT_EQ(ramp.micro_batches_per_rank(1000), 8);
  EXPECT_DOUBLE_EQ(ramp.lr_factor(0), std::sqrt(8.0 / 64.0));
  EXPECT_DOUBLE_EQ(ramp.lr_factor(5000), 1.0);
  EXPECT_THROW(BatchRamp({4, 6, 64, 1000, false}, 2), Error);   // 6 is not a multiple of 8
  EXPECT_THROW(BatchRamp({4, 64, 16, 1000, false}, 1), Error);  // shrinking
  EXPECT_EQ(BatchRamp({4, 0, 16, 0, false}, 1).global_sequences(0), 16);
}

TEST(ParamGroups, DefaultRulesSendMatricesToMuonAndSkipDecayOnGains) {
  const ParameterTable table(model_dims(preset_config("tiny")));
  const std::vector<ParamAssignment> groups = assign_param_groups(table, default_group_rules());
  auto find = [&](const std::string& name) {
    for (const ParamAssignment& a : groups) {
      if (a.param->name == name) return a;
    }
    ADD_FAILURE() << name;
    return ParamAssignment{};
  };
  for (const char* name :
       {"model.layers.0.self_attn.qkv_proj.q_proj.weight", "model.layers.0.self_attn.o_proj.weight",
        "model.layers.1.self_attn.qkv_proj.v_proj_delayed.weight", "model.layers.1.mlp.experts.gate_up_proj",
        "model.layers.0.mlp.experts.down_proj", "model.layers.0.mlp.gate.down_proj.weight",
        "model.layers.1.mlp.gate.router_mlp.fc2.weight",
        "model.layers.1.mlp.gate.router_mlp.out_proj.weight"}) {
    EXPECT_EQ(find(name).optimizer, OptimizerKind::Muon) << name;
    EXPECT_TRUE(find(name).weight_decay) << name;
  }
  for (const char* name :
       {"model.embed_tokens.weight", "model.layers.0.self_attn.qkv_proj.conv_qk_grouped.weight"}) {
    EXPECT_EQ(find(name).optimizer, OptimizerKind::AdamW) << name;
    EXPECT_TRUE(find(name).weight_decay) << name;
  }
  for (const char* name :
       {"model.norm.weight", "model.layers.0.input_layernorm.weight", "model.layers.0.self_attn.qk_norm.temp",
        "model.layers.1.mlp.gate.router_states_scale", "model.layers.0.mlp.gate.down_proj.bias",
        "model.layers.0.post_mlp_residual_scale.residual_bias", "model.input_hidden_states_scale",
        "model.layers.0.self_attn.qkv_proj.conv_qk_depthwise.bias"}) {
    EXPECT_EQ(find(name).optimizer, OptimizerKind::AdamW) << name;
    EXPECT_FALSE(find(name).weight_decay) << name;
  }
  for (const ParamAssignment& a : groups) EXPECT_NE(a.param->role, ParamRole::BalancingBias);
  EXPECT_NE(describe_param_groups(groups).find("model.layers.1.mlp.experts.gate_up_proj"), std::string::npos);
}

// Muon's parameters have no second moment: the state is one float per trainable parameter plus one per
// AdamW parameter (on zaya1-base, where Muon holds nearly every weight, close to half of two per parameter).
TEST(Optimizer, HoldsASecondMomentForAdamWParametersAlone) {
  ParameterStore params(model_dims(preset_config("tiny")));
  const Optimizer optimizer(params, {}, cpu_ops());
  int64_t adamw = 0;
  for (const ParamAssignment& a : optimizer.assignments()) {
    if (a.optimizer == OptimizerKind::AdamW) adamw += a.param->numel();
  }
  EXPECT_GT(adamw, 0);
  EXPECT_EQ(optimizer.state_floats(), params.table().total_floats() + adamw);
  EXPECT_LT(optimizer.state_floats(), 2 * params.table().total_floats());
}

TEST(ParamGroups, RulesAreCheckedAgainstTheModel) {
  const ParameterTable table(model_dims(preset_config("tiny")));
  EXPECT_THROW(assign_param_groups(table, {{"*.weight", OptimizerKind::AdamW, false, 1}}),
               Error);                                                                     // biases unmatched
  EXPECT_THROW(assign_param_groups(table, {{"*", OptimizerKind::Muon, true, 1}}), Error);  // vectors to Muon
  const auto custom = assign_param_groups(
      table, {{"*.experts.*", OptimizerKind::AdamW, false, 0.5f}, {"*", OptimizerKind::AdamW, true, 1}});
  for (const ParamAssignment& a : custom) {
    if (a.param->role == ParamRole::ExpertWeight) {
      EXPECT_FLOAT_EQ(a.lr_multiplier, 0.5f);
    }
  }
}

// A router that sends most tokens to one expert, balanced by the biases alone.
int64_t steps_to_balance(BalancingMode mode, float lr) {
  const int64_t experts = 8, routes = experts + 1, tokens = 4096;
  const RandomStream rng(1, RngPurpose::Test, 0);
  std::vector<float> logits(size_t(tokens * routes));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < routes; ++e) {
      logits[size_t(t * routes + e)] = rng.normal(uint64_t(t * routes + e)) + (e == 0 ? 2.5f : 0.0f);
    }
  }
  BalancingConfig config;
  config.mode = mode;
  config.lr = lr;
  BalancingController controller(config, 1, experts);
  std::vector<float> biases(static_cast<size_t>(routes), 0.0f), probs(logits.size()),
      gate(static_cast<size_t>(tokens)), lse(static_cast<size_t>(tokens));
  biases.back() = -1.0f;
  std::vector<int32_t> choice(static_cast<size_t>(tokens));
  for (int64_t step = 0; step < 2000; ++step) {
    cpu_ops().route_top1(logits.data(), biases.data(), tokens, routes, probs.data(), choice.data(),
                         gate.data(), lse.data());
    std::vector<std::vector<int64_t>> counts(1, std::vector<int64_t>(size_t(routes), 0));
    for (int32_t c : choice) ++counts[0][size_t(c)];
    const int64_t busiest = *std::max_element(counts[0].begin(), counts[0].end() - 1);
    const double mean = double(tokens - counts[0].back()) / double(experts);
    if (step == 0) {
      EXPECT_GT(double(busiest) / mean, 3.0);  // the start is badly unbalanced
    }
    if (double(busiest) / mean < 1.3) return step;
    controller.update(counts, {biases.data()});
  }
  return -1;
}

TEST(Balancing, BothControllersBalanceASkewedRouter) {
  const int64_t adam = steps_to_balance(BalancingMode::Adam, 1e-2f);
  const int64_t sign = steps_to_balance(BalancingMode::Sign, 1e-3f);
  EXPECT_GE(adam, 1);
  EXPECT_LE(adam, 200);
  EXPECT_GE(sign, 1);
  EXPECT_LE(sign, 1000);
  std::printf("max/mean load under 1.3 after %lld steps (adam, lr 1e-2) and %lld steps (sign, rate 1e-3)\n",
              (long long)adam, (long long)sign);
  EXPECT_EQ(steps_to_balance(BalancingMode::Off, 1e-2f), -1);
}

TEST(Balancing, SkipPolicies) {
  BalancingConfig config;
  BalancingController free_skip(config, 1, 4);
  const std::vector<double> free_targets = free_skip.targets({10, 10, 10, 10, 60});
  EXPECT_DOUBLE_EQ(free_targets[0], 0.1);
  EXPECT_DOUBLE_EQ(free_targets[4], 0.6);
  config.skip = SkipPolicy::Target;
  config.skip_target = 0.2f;
  BalancingController target(config, 1, 4);
  EXPECT_NEAR(target.targets({10, 10, 10, 10, 60})[0], 0.2, 1e-7);
  std::vector<float> biases = {0, 0, 0, 0, -1};
  target.update({{10, 10, 10, 10, 60}}, {biases.data()});
  EXPECT_LT(biases[4], -1.0f);  // too much skipping: the skip bias goes down
  biases = {0, 0, 0, 0, -1};
  free_skip.update({{10, 10, 10, 10, 60}}, {biases.data()});
  EXPECT_EQ(biases[4], -1.0f);  // free: not the controller's to move
}

// K micro-batches of n sequences give the gradient and the update of one batch of K n sequences.
TEST(Accumulation, MicroBatchesEqualOneLargerBatch) {
  const ZayaConfig config = preset_config("tiny");
  ParameterStore split(model_dims(config)), whole(model_dims(config));
  init_parameters(split, 0.02, 4);
  init_parameters(whole, 0.02, 4);
  const int64_t sequences = 8, seq = 24, micro = 2;
  const RandomStream rng(2, RngPurpose::Test, 0);
  std::vector<int32_t> ids(size_t(sequences * seq)), labels(size_t(sequences * seq));
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = int32_t(rng.bits(i) % 512);
    labels[i] = i % 5 == 0 ? kIgnoreLabel : int32_t(rng.bits(i + 9999) % 512);  // some positions unlabelled
  }
  ZayaModel split_model(split, cpu_ops()), whole_model(whole, cpu_ops());
  Optimizer split_opt(split, {}, cpu_ops()), whole_opt(whole, {}, cpu_ops());
  BalancingController split_bal({}, 2, 4), whole_bal({}, 2, 4);
  const std::unique_ptr<Communicator> comm = make_single_process_communicator();
  const std::unique_ptr<DeviceCommunicator> collectives = make_host_device_communicator(*comm);
  const auto split_step = test::one_process_train_step(split_model, split_opt, split_bal, *collectives);
  const auto whole_step = test::one_process_train_step(whole_model, whole_opt, whole_bal, *collectives);

  std::vector<Batch> parts;
  for (int64_t k = 0; k < sequences / micro; ++k) {
    parts.push_back({ids.data() + k * micro * seq, labels.data() + k * micro * seq, nullptr, micro, seq});
  }
  const StepReport a = split_step->run(parts, 1.0);
  const StepReport b = whole_step->run({{ids.data(), labels.data(), nullptr, sequences, seq}}, 1.0);
  EXPECT_NEAR(a.loss, b.loss, 1e-6 * b.loss);
  EXPECT_NEAR(a.optimizer.grad_norm, b.optimizer.grad_norm, 1e-5 * b.optimizer.grad_norm);
  for (size_t l = 0; l < a.routing.size(); ++l) EXPECT_EQ(a.routing[l].fractions, b.routing[l].fractions);
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < split.table().total_floats(); ++i) {
    diff += std::pow(double(split.values()[i]) - whole.values()[i], 2);
    norm += std::pow(double(whole.values()[i]), 2);
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-6);
}

}  // namespace
}  // namespace zaya

namespace zaya {
namespace {

// ZeRO-1: optimizers that each own one range of the dense region and one of the expert region, given the
// same gradients and the whole gradient's norm, make together exactly the update of one optimizer that owns
// everything, step after step. The regions are cut over different rank counts, as expert parallelism does.
TEST(OptimizerShards, ShardedUpdatesEqualTheWholeUpdate) {
  const ModelDims dims = model_dims(preset_config("tiny"));
  ParameterStore whole(dims);
  init_parameters(whole, 0.02, 5);
  const ParameterTable& table = whole.table();
  const int64_t floats = table.total_floats(), dense = table.dense_floats();
  const RandomStream rng(5, RngPurpose::Test, 3);
  for (int64_t i = 0; i < floats; ++i) whole.grads()[i] = 0.01f * rng.normal(uint64_t(i));
  OptimizerConfig config;
  config.grad_clip = 0.5f;  // clipping on, so that the norm matters
  Optimizer all(whole, config, cpu_ops());

  const int ranks = 3, expert_ranks = 2;
  const OptimizerShards dense_shards = plan_optimizer_shards(all.assignments(), 0, dense, ranks);
  const OptimizerShards expert_shards = plan_optimizer_shards(all.assignments(), dense, floats, expert_ranks);
  ASSERT_EQ(dense_shards.ranks(), ranks);
  ASSERT_EQ(expert_shards.ranks(), expert_ranks);
  EXPECT_EQ(dense_shards.begin(0), 0);
  EXPECT_EQ(dense_shards.end(ranks - 1), dense);
  EXPECT_EQ(expert_shards.begin(0), dense);
  EXPECT_EQ(expert_shards.end(expert_ranks - 1), floats);
  for (const ParamInfo& param : table.params()) {
    EXPECT_EQ(param.role == ParamRole::ExpertWeight, param.offset >= dense) << param.name;
  }
  std::vector<std::unique_ptr<ParameterStore>> parts;
  std::vector<std::unique_ptr<Optimizer>> optimizers;
  double shard_sum_squares = 0;
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::pair<int64_t, int64_t>> owned = {dense_shards.range(r)};
    if (r < expert_ranks) owned.push_back(expert_shards.range(r));
    for (const auto& [begin, end] : owned) {
      EXPECT_LT(begin, end) << "rank " << r << " owns nothing";
      const bool at_parameter =
          std::any_of(all.assignments().begin(), all.assignments().end(),
                      [&](const ParamAssignment& a) { return a.param->offset == begin; });
      EXPECT_TRUE(at_parameter) << "rank " << r << " starts inside a parameter";
    }
    parts.push_back(std::make_unique<ParameterStore>(dims));
    std::memcpy(parts.back()->values(), whole.values(), size_t(floats) * 4);
    std::memcpy(parts.back()->grads(), whole.grads(), size_t(floats) * 4);
    optimizers.push_back(std::make_unique<Optimizer>(*parts.back(), config, cpu_ops(), owned));
    shard_sum_squares += optimizers.back()->owned_grad_sum_squares();
  }
  const double whole_sum_squares = all.owned_grad_sum_squares();
  EXPECT_NEAR(shard_sum_squares, whole_sum_squares, 1e-12 * whole_sum_squares);

  const double norm = std::sqrt(whole_sum_squares);
  for (int step = 0; step < 3; ++step) {
    all.step(1.0, norm);
    for (int r = 0; r < ranks; ++r) optimizers[size_t(r)]->step(1.0, norm);
  }
  auto same = [&](int r, std::pair<int64_t, int64_t> range) {
    const auto [begin, end] = range;
    EXPECT_EQ(
        std::memcmp(parts[size_t(r)]->values() + begin, whole.values() + begin, size_t(end - begin) * 4), 0)
        << "rank " << r << " at " << begin;
    for (const ParamAssignment& a : all.assignments()) {
      if (a.param->offset < begin || a.param->offset >= end) continue;
      EXPECT_EQ(std::memcmp(optimizers[size_t(r)]->first_moment(*a.param), all.first_moment(*a.param),
                            size_t(a.param->numel()) * 4),
                0)
          << a.param->name;
    }
  };
  for (int r = 0; r < ranks; ++r) same(r, dense_shards.range(r));
  for (int r = 0; r < expert_ranks; ++r) same(r, expert_shards.range(r));
}

// Gradient buckets cover a region of the flat layout once, in the order the backward pass finishes it: each
// decoder layer's parameters in a bucket that starts at or after that layer's backward, the rest at the end.
class GradientBuckets : public ::testing::TestWithParam<bool> {};

TEST_P(GradientBuckets, CoverTheRegionOnceInTheOrderBackwardFinishesIt) {
  const bool experts = GetParam();
  const ParameterStore store(model_dims(preset_config("tiny")));
  const ParameterTable& table = store.table();
  const int64_t begin = experts ? table.dense_floats() : 0;
  const int64_t total = experts ? table.total_floats() : table.dense_floats(), layers = store.dims().layers;
  auto in_region = [&](const ParamInfo& param) { return param.offset >= begin && param.offset < total; };
  int64_t largest_layer = 0;
  for (int64_t l = 0; l < layers; ++l) {
    int64_t floats = 0;
    for (const ParamInfo& param : table.params())
      floats += param.layer == l && in_region(param) ? param.numel() : 0;
    largest_layer = std::max(largest_layer, floats);
  }
  for (int64_t bucket_floats : {int64_t(0), int64_t(1), 2 * largest_layer, total - begin}) {
    const std::vector<GradientBucket> buckets = plan_gradient_buckets(table, begin, total, bucket_floats);
    SCOPED_TRACE("bucket_floats " + std::to_string(bucket_floats));
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (size_t i = 0; i < buckets.size(); ++i) {
      const GradientBucket& b = buckets[i];
      ASSERT_LT(b.begin, b.end);
      ranges.emplace_back(b.begin, b.end);
      if (i > 0) {
        const int64_t before = buckets[i - 1].ready_layer;
        EXPECT_TRUE(b.ready_layer == -1 || (before >= 0 && b.ready_layer < before))
            << "out of order at " << i;
      }
      if (b.ready_layer > 0) {
        EXPECT_GE(b.end - b.begin, bucket_floats);
      }
    }
    std::sort(ranges.begin(), ranges.end());
    int64_t next = begin;
    for (const auto& [from, to] : ranges) {
      EXPECT_EQ(from, next);
      next = to;
    }
    EXPECT_EQ(next, total);
    for (const ParamInfo& param : table.params()) {
      if (!in_region(param)) continue;
      const auto holder = std::find_if(buckets.begin(), buckets.end(), [&](const GradientBucket& b) {
        return b.begin <= param.offset && param.offset + param.numel() <= b.end;
      });
      ASSERT_NE(holder, buckets.end()) << param.name << " is cut by a bucket edge";
      if (param.layer < 0) {
        EXPECT_EQ(holder->ready_layer, -1) << param.name;
      } else {
        EXPECT_TRUE(holder->ready_layer == -1 || holder->ready_layer <= param.layer) << param.name;
      }
    }
    const size_t end_buckets = size_t(std::count_if(
        buckets.begin(), buckets.end(), [](const GradientBucket& b) { return b.ready_layer < 0; }));
    if (bucket_floats == 0) {
      EXPECT_EQ(buckets.size(), 1u);
    } else if (bucket_floats == 1) {
      EXPECT_EQ(buckets.size(), size_t(layers) + end_buckets);  // a bucket per layer
    } else {
      EXPECT_LT(buckets.size(), size_t(layers) + end_buckets);  // layers share buckets
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DenseAndExperts, GradientBuckets, ::testing::Bool());

}  // namespace
}  // namespace zaya
