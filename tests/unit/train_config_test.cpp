#include <gtest/gtest.h>

#include "core/error.h"
#include "train/train_config.h"

namespace zaya {
namespace {

TEST(TrainConfig, EmptyMeansTheDocumentedDefaults) {
  const TrainConfig c = parse_train_config("", "empty.toml");
  EXPECT_FLOAT_EQ(c.optimizer.lr, 3e-3f);
  EXPECT_FLOAT_EQ(c.optimizer.muon.momentum, 0.95f);
  EXPECT_TRUE(c.optimizer.muon.nesterov);
  EXPECT_EQ(c.optimizer.muon.ns_steps, 5);
  EXPECT_FLOAT_EQ(c.optimizer.muon.ns_coefficients[1], -4.7750f);
  EXPECT_FLOAT_EQ(c.optimizer.muon.rms_scale, 0.2f);
  EXPECT_FLOAT_EQ(c.optimizer.adamw.beta2, 0.95f);
  EXPECT_EQ(c.optimizer.groups.size(), default_group_rules().size());
  EXPECT_EQ(c.schedule.kind, ScheduleKind::Wsd);
  EXPECT_EQ(c.balancing.mode, BalancingMode::Adam);
  EXPECT_EQ(c.balancing.skip, SkipPolicy::Free);
  EXPECT_FALSE(c.aux_loss.enabled());
}

TEST(TrainConfig, ReadsEverySection) {
  const TrainConfig c = parse_train_config(R"(
[optimizer]
lr = 0.02
weight_decay = 0
grad_clip = 0.5
[optimizer.muon]
momentum = 0.9
nesterov = false
ns_steps = 3
ns_coefficients = [3, -3, 1]
[optimizer.adamw]
beta2 = 0.99
[[optimizer.groups]]
pattern = "*.experts.*"
optimizer = "muon"
weight_decay = true
lr_multiplier = 2
[[optimizer.groups]]
pattern = "*"
[schedule]
kind = "cosine"
warmup_tokens = 1e6
min_lr_ratio = 0.1
[balancing]
mode = "sign"
lr = 0.001
skip = "target"
skip_target = 0.1
[aux_loss]
z_weight = 0.001
[batch]
micro_batch = 4
sequences = 64
start_sequences = 16
ramp_tokens = 1_000_000
sqrt_lr_scaling = true
)",
                                           "full.toml");
  EXPECT_FLOAT_EQ(c.optimizer.lr, 0.02f);
  EXPECT_FLOAT_EQ(c.optimizer.weight_decay, 0.0f);
  EXPECT_FALSE(c.optimizer.muon.nesterov);
  EXPECT_EQ(c.optimizer.muon.ns_steps, 3);
  EXPECT_FLOAT_EQ(c.optimizer.muon.ns_coefficients[2], 1.0f);
  ASSERT_EQ(c.optimizer.groups.size(), 2u);
  EXPECT_EQ(c.optimizer.groups[0].optimizer, OptimizerKind::Muon);
  EXPECT_FLOAT_EQ(c.optimizer.groups[0].lr_multiplier, 2.0f);
  EXPECT_EQ(c.schedule.kind, ScheduleKind::Cosine);
  EXPECT_EQ(c.schedule.warmup_tokens, 1000000);
  EXPECT_EQ(c.balancing.mode, BalancingMode::Sign);
  EXPECT_EQ(c.balancing.skip, SkipPolicy::Target);
  EXPECT_FLOAT_EQ(c.aux_loss.z_weight, 0.001f);
  EXPECT_EQ(c.batch.start_sequences, 16);
  EXPECT_EQ(c.batch.ramp_tokens, 1000000);
  EXPECT_TRUE(c.batch.sqrt_lr_scaling);
}

TEST(TrainConfig, OverridesApplyBeforeValidation) {
  const TrainConfig c = parse_train_config("[optimizer]\nlr = 0.1\n", "x.toml",
                                           {"optimizer.lr=0.5", "schedule.kind=constant", "optimizer.muon.ns_steps=7"});
  EXPECT_FLOAT_EQ(c.optimizer.lr, 0.5f);
  EXPECT_EQ(c.schedule.kind, ScheduleKind::Constant);
  EXPECT_EQ(c.optimizer.muon.ns_steps, 7);
  EXPECT_THROW(parse_train_config("", "x.toml", {"optimizer.lr=-1"}), Error);
  EXPECT_THROW(parse_train_config("", "x.toml", {"optimizer.bogus=1"}), Error);
  EXPECT_THROW(parse_train_config("", "x.toml", {"no_equals_sign"}), Error);
}

struct BadCase {
  const char* text;
  const char* want;  // a fragment of the one-line message
};

class BadTrainConfig : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadTrainConfig, IsAnErrorNamingFileLineAndKey) {
  try {
    parse_train_config(GetParam().text, "run.toml");
    FAIL() << GetParam().text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().want), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("run.toml"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadTrainConfig,
    ::testing::Values(BadCase{"[optimizer]\nlr = 1\nlearning_rate = 2\n", "run.toml:3: field 'optimizer.learning_rate': unknown key"},
                      BadCase{"[optimizer]\nlr = \"fast\"\n", "field 'optimizer.lr': expected a number"},
                      BadCase{"[schedule]\nkind = \"linear\"\n", "field 'schedule.kind': expected \"constant\""},
                      BadCase{"[balancing]\nmode = \"pid\"\n", "field 'balancing.mode'"},
                      BadCase{"[batch]\nmicro_batch = 3\nsequences = 8\n", "field 'batch.sequences'"},
                      BadCase{"[optimizer.muon]\nns_coefficients = [1, 2]\n", "three numbers"},
                      BadCase{"[[optimizer.groups]]\noptimizer = \"muon\"\n", "field 'optimizer.groups[0].pattern'"},
                      BadCase{"[optimizer]\nlr = 0.1\n[optimizer\n", "run.toml:3"},
                      BadCase{"[nonsense]\n", "field 'nonsense': unknown key"},
                      BadCase{"[optimizer]\ngrad_clip = -1\n", "grad_clip"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

}  // namespace
}  // namespace zaya
