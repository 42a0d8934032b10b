#include <gtest/gtest.h>

#include "core/error.h"
#include "train/train_config.h"

namespace zaya {
namespace {

// The keys a run cannot do without.
const std::string kMinimal = R"(
[model]
preset = "tiny"
[data]
tokenizer = "tokenizer.json"
[[stages]]
tokens = 100000
seq_len = 64
mixture = { "data/docs_train" = 1.0 }
)";

TEST(TrainConfig, EmptyMeansTheDocumentedDefaults) {
  const TrainConfig c = parse_train_config(kMinimal, "minimal.toml");
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
  EXPECT_TRUE(c.run.adapt_threads);
  EXPECT_FALSE(parse_train_config(kMinimal + "[run]\nadapt_threads = false\n", "x.toml").run.adapt_threads);
}

TEST(TrainConfig, ReadsEverySection) {
  const TrainConfig c = parse_train_config(kMinimal + R"(
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

TEST(TrainConfig, ReadsTheRunSections) {
  const TrainConfig c = parse_train_config(R"(
[run]
seed = 7
threads = 2
gradient_bucket_mb = 0.5
recompute = "attention"
communicator = "mpi"
[model]
init = "runs/previous/model"
dtype = "bfloat16"
[data]
tokenizer = "tok.json"
validation = "data/docs_val"
[[stages]]
name = "short"
tokens = 1_000
seq_len = 128
mixture = { "data/a" = 3, "data/b" = 1 }
[[stages]]
name = "long"
tokens = 500
seq_len = 1024
rope_theta = 1e6
lr_multiplier = 0.5
mixture = { "data/b" = 1 }
[checkpoint]
every_steps = 50
every_minutes = 2.5
keep = 2
[eval]
every_steps = 10
tokens = 4096
[sample]
every_steps = 100
prompt = "def "
temperature = 0
[log]
console_seconds = 30
tensorboard = false
max_bad_steps = 3
)",
                                           "run.toml");
  EXPECT_EQ(c.run.seed, 7u);
  EXPECT_EQ(c.run.gradient_bucket_mb, 0.5);
  EXPECT_EQ(c.run.recompute, Recompute::Attention);
  EXPECT_EQ(c.run.communicator, "mpi");
  EXPECT_EQ(c.model.init, "runs/previous/model");
  EXPECT_EQ(c.data.validation, "data/docs_val");
  ASSERT_EQ(c.stages.size(), 2u);
  EXPECT_EQ(c.stages[0].name, "short");
  ASSERT_EQ(c.stages[0].mixture.size(), 2u);
  EXPECT_DOUBLE_EQ(c.stages[0].mixture[0].weight + c.stages[0].mixture[1].weight, 4.0);
  EXPECT_DOUBLE_EQ(c.stages[1].rope_theta, 1e6);
  EXPECT_EQ(c.total_tokens(), 1500);
  EXPECT_EQ(c.checkpoint.keep, 2);
  EXPECT_DOUBLE_EQ(c.checkpoint.every_minutes, 2.5);
  EXPECT_EQ(c.eval.tokens, 4096);
  EXPECT_EQ(c.sample.prompt, "def ");
  EXPECT_FALSE(c.log.tensorboard);
}

TEST(TrainConfig, OverridesApplyBeforeValidation) {
  const TrainConfig c =
      parse_train_config(kMinimal + "[optimizer]\nlr = 0.1\n", "x.toml",
                         {"optimizer.lr=0.5", "schedule.kind=constant", "optimizer.muon.ns_steps=7"});
  EXPECT_FLOAT_EQ(c.optimizer.lr, 0.5f);
  EXPECT_EQ(c.schedule.kind, ScheduleKind::Constant);
  EXPECT_EQ(c.optimizer.muon.ns_steps, 7);
  EXPECT_THROW(parse_train_config(kMinimal, "x.toml", {"optimizer.lr=-1"}), Error);
  EXPECT_THROW(parse_train_config(kMinimal, "x.toml", {"optimizer.bogus=1"}), Error);
  EXPECT_THROW(parse_train_config(kMinimal, "x.toml", {"no_equals_sign"}), Error);
  EXPECT_THROW(parse_train_config(kMinimal, "x.toml", {"stages.99999999999999999999999.seq_len=1"}), Error)
      << "an index past stoul's range is an Error naming the key, not std::out_of_range";
  EXPECT_EQ(parse_train_config(kMinimal, "x.toml", {"stages.0.seq_len=128"}).stages[0].seq_len, 128);
}

struct BadCase {
  const char* text;
  const char* want;  // a fragment of the one-line message
};

class BadTrainConfig : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadTrainConfig, IsAnErrorNamingFileLineAndKey) {
  try {
    parse_train_config(kMinimal + GetParam().text, "run.toml");
    FAIL() << GetParam().text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(GetParam().want), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("run.toml"), std::string::npos) << e.what();
  }
}

TEST(TrainConfig, TheRunSectionsAreRequired) {
  EXPECT_THROW(parse_train_config("", "x.toml"), Error);
  const std::string no_stages = "[model]\npreset = \"tiny\"\n[data]\ntokenizer = \"t.json\"\n";
  EXPECT_THROW(parse_train_config(no_stages, "x.toml"), Error);
  EXPECT_THROW(parse_train_config(kMinimal + "[model]\nconfig = \"c.json\"\n", "x.toml"), Error);  // twice
}

INSTANTIATE_TEST_SUITE_P(
    Cases, BadTrainConfig,
    ::testing::Values(
        BadCase{"[optimizer]\nlr = 1\nlearning_rate = 2\n", "field 'optimizer.learning_rate': unknown key"},
        BadCase{"[optimizer]\nlr = \"fast\"\n", "field 'optimizer.lr': expected a number"},
        BadCase{"[schedule]\nkind = \"linear\"\n", "field 'schedule.kind': expected \"constant\""},
        BadCase{"[balancing]\nmode = \"pid\"\n", "field 'balancing.mode'"},
        BadCase{"[batch]\nmicro_batch = 3\nsequences = 8\n", "field 'batch.sequences'"},
        BadCase{"[optimizer.muon]\nns_coefficients = [1, 2]\n", "three numbers"},
        BadCase{"[[optimizer.groups]]\noptimizer = \"muon\"\n", "field 'optimizer.groups[0].pattern'"},
        BadCase{"[optimizer]\nlr = 0.1\n[optimizer\n", "run.toml:12: Error while parsing table header"},
        BadCase{"[nonsense]\n", "field 'nonsense': unknown key"},
        BadCase{"[optimizer]\ngrad_clip = -1\n", "grad_clip"},
        BadCase{"[run]\ngradient_bucket_mb = -1\n", "field 'run.gradient_bucket_mb': must be between 0"},
        BadCase{"[run]\ncontext_parallel = 0\n", "field 'run.context_parallel': must be at least 1"},
        BadCase{"[run]\nrecompute = \"some\"\n",
                "field 'run.recompute': expected \"none\", \"attention\" or"},
        BadCase{"[run]\ncommunicator = \"gloo\"\n",
                "field 'run.communicator': expected \"auto\", \"mpi\" or"},
        BadCase{"[[stages]]\ntokens = 5\nseq_len = 8\nmixture = { \"d\" = 0 }\n", "weight must be positive"},
        BadCase{"[[stages]]\ntokens = 5\nseq_len = 8\nmixture = { \"d\" = 1 }\nwindow = 3\n",
                "field 'stages[1].window': unknown key"},
        // TOML has nan and inf; no setting takes them. Integers are never cut to fit.
        BadCase{"[optimizer]\nlr = nan\n", "field 'optimizer.lr': expected a finite number, got nan"},
        BadCase{"[optimizer]\nweight_decay = inf\n", "field 'optimizer.weight_decay': expected a finite"},
        BadCase{"[optimizer.muon]\nns_coefficients = [1, -inf, 2]\n", "expected a finite number"},
        BadCase{"[checkpoint]\nkeep = 4294967297\n", "field 'checkpoint.keep': 4294967297 is out of range"},
        BadCase{"[run]\nthreads = -4294967295\n", "field 'run.threads'"},
        BadCase{"[checkpoint]\nevery_steps = 1e30\n", "field 'checkpoint.every_steps': expected an integer"},
        BadCase{"[[stages]]\ntokens = 9223372036854775807\nseq_len = 8\nmixture = { \"d\" = 1 }\n",
                "field 'stages[1].tokens': must be between 1 and"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

}  // namespace
}  // namespace zaya
