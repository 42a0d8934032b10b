// Checkpoints: an exact round trip of everything a run carries, atomic replacement, damaged checkpoints
// skipped in favour of the previous one, and the newest `keep` retained.

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "backend/ops.h"
#include "core/error.h"
#include "core/rng.h"
#include "model/model_io.h"
#include "optim/balancing.h"
#include "optim/optimizer.h"
#include "train/checkpoint.h"
#include "unit/test_util.h"

namespace zaya {
namespace fs = std::filesystem;
namespace {

struct RunState {
  ZayaConfig config = preset_config("tiny");
  ParameterStore params{model_dims(config)};
  Optimizer optimizer{params, {}, cpu_ops()};
  BalancingController balancing{{}, 2, 4};

  explicit RunState(uint64_t seed) {
    init_parameters(params, 0.02, seed);
    const RandomStream rng(seed, RngPurpose::Test, 1);
    for (int64_t i = 0; i < params.table().total_floats(); ++i) {
      optimizer.first_moment()[i] = rng.normal(uint64_t(i));
      optimizer.second_moment()[i] = rng.uniform(uint64_t(i));
    }
    for (size_t i = 0; i < balancing.first_moment().size(); ++i)
      balancing.first_moment()[i] = float(i) * 0.5f;
    optimizer.set_steps_taken(int64_t(seed) * 10);
    balancing.steps() = int64_t(seed) * 3;
  }
  TrainerState state(int64_t step) const {
    TrainerState s;
    s.step = step;
    s.tokens = step * 1000;
    s.stage = 1;
    s.stage_tokens = 123;
    s.bad_steps = 2;
    s.seconds = 4.5;
    s.loader = {1, 77, {40, 37}};
    return s;
  }
};

TEST(Checkpoint, RoundTripsEverythingExactly) {
  test::TempDir dir;
  RunState saved(1);
  test::write_bytes(dir.file("tokenizer.json"), "{\"fake\": true}");
  write_checkpoint(take_snapshot(saved.config, saved.params, saved.optimizer, saved.balancing,
                                 saved.state(20), dir.file("tokenizer.json")),
                   dir.path(), 3);
  const std::string found = find_checkpoint(dir.path());
  EXPECT_EQ(fs::path(found).filename(), "step_20");
  EXPECT_TRUE(fs::exists(found + "/tokenizer.json"));

  RunState loaded(2);
  const LoadedCheckpoint back = load_checkpoint(found, loaded.params, loaded.optimizer, loaded.balancing);
  const size_t bytes = size_t(saved.params.table().total_floats()) * 4;
  EXPECT_EQ(std::memcmp(loaded.params.values(), saved.params.values(), bytes), 0);
  for (const ParamAssignment& a : saved.optimizer.assignments()) {
    EXPECT_EQ(std::memcmp(loaded.optimizer.first_moment() + a.param->offset,
                          saved.optimizer.first_moment() + a.param->offset, size_t(a.param->numel()) * 4),
              0);
    if (a.optimizer == OptimizerKind::AdamW) {
      EXPECT_EQ(std::memcmp(loaded.optimizer.second_moment() + a.param->offset,
                            saved.optimizer.second_moment() + a.param->offset, size_t(a.param->numel()) * 4),
                0);
    }
  }
  EXPECT_EQ(loaded.balancing.first_moment(), saved.balancing.first_moment());
  EXPECT_EQ(loaded.optimizer.steps_taken(), 10);
  EXPECT_EQ(loaded.balancing.steps(), 3);
  EXPECT_EQ(back.state.step, 20);
  EXPECT_EQ(back.state.loader, saved.state(20).loader);
  EXPECT_EQ(back.state.bad_steps, 2);
  EXPECT_EQ(back.config.hidden_size, saved.config.hidden_size);
  // The checkpoint is a model directory transformers' layout: load_model reads it as one.
  EXPECT_EQ(load_model(found).params->table().total_floats(), saved.params.table().total_floats());
}

TEST(Checkpoint, FallsBackPastDamageAndKeepsTheNewest) {
  test::TempDir dir;
  RunState run(1);
  for (int64_t step : {10, 20, 30, 40}) {
    write_checkpoint(take_snapshot(run.config, run.params, run.optimizer, run.balancing, run.state(step), ""),
                     dir.path(), 3);
  }
  EXPECT_FALSE(fs::exists(dir.file("checkpoints/step_10")));
  EXPECT_TRUE(fs::exists(dir.file("checkpoints/step_20")));
  EXPECT_EQ(fs::path(find_checkpoint(dir.path())).filename(), "step_40");

  // A flipped byte in the newest: reported, and the one before is used.
  std::string weights = test::read_bytes(dir.file("checkpoints/step_40/model.safetensors"));
  weights[weights.size() / 2] ^= 1;
  test::write_bytes(dir.file("checkpoints/step_40/model.safetensors"), weights);
  EXPECT_THROW(verify_checkpoint(dir.file("checkpoints/step_40")), Error);
  EXPECT_EQ(fs::path(find_checkpoint(dir.path())).filename(), "step_30");

  // A write that died half way (a temporary directory, or a step directory `latest` never named) is ignored.
  fs::create_directories(dir.file("checkpoints/.step_50.tmp.123"));
  fs::copy(dir.file("checkpoints/step_30"), dir.file("checkpoints/step_50"));
  EXPECT_EQ(fs::path(find_checkpoint(dir.path())).filename(), "step_30");

  fs::remove(dir.file("checkpoints/step_30/trainer_state.json"));
  fs::remove(dir.file("checkpoints/step_20/checksums.json"));
  EXPECT_EQ(find_checkpoint(dir.path()), "");
  test::TempDir empty;
  EXPECT_EQ(find_checkpoint(empty.path()), "");
}

TEST(Checkpoint, BackgroundWriterReportsErrors) {
  test::TempDir dir;
  RunState run(1);
  test::write_bytes(dir.file("file"), "x");
  CheckpointWriter writer(dir.file("file"), 2);  // the run directory is a file: creating checkpoints/ fails
  writer.write_async(take_snapshot(run.config, run.params, run.optimizer, run.balancing, run.state(1), ""));
  EXPECT_ANY_THROW(writer.wait());
}

}  // namespace
}  // namespace zaya
