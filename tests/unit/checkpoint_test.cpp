// Checkpoints: an exact round trip of everything a run carries, atomic replacement, damaged checkpoints
// skipped in favour of the previous one, and the newest `keep` retained.

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <utility>

#include "backend/ops.h"
#include "core/error.h"
#include "core/rng.h"
#include "dist/communicator.h"
#include "model/model_io.h"
#include "optim/balancing.h"
#include "optim/optimizer.h"
#include "optim/optimizer_shards.h"
#include "train/checkpoint.h"
#include "train/checkpoint_writer.h"
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
    for (const ParamAssignment& a : optimizer.assignments()) {
      const ParamInfo& param = *a.param;
      float* second = optimizer.second_moment(param);  // AdamW's alone
      EXPECT_EQ(second != nullptr, a.optimizer == OptimizerKind::AdamW) << param.name;
      for (int64_t i = 0; i < param.numel(); ++i) {
        optimizer.first_moment(param)[i] = rng.normal(uint64_t(param.offset + i));
        if (second) second[i] = rng.uniform(uint64_t(param.offset + i));
      }
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
    s.precision = "bf16";
    return s;
  }
};

TEST(Checkpoint, RoundTripsEverythingExactly) {
  test::TempDir dir;
  RunState saved(1);
  const std::string tokenizer = test::fixture("tokenizer/byte_level.json");
  write_checkpoint(
      take_snapshot(saved.config, saved.params, saved.optimizer, saved.balancing, saved.state(20), tokenizer),
      dir.path(), 3);
  const std::string found = find_checkpoint(dir.path());
  EXPECT_EQ(fs::path(found).filename(), "step_20");
  EXPECT_EQ(test::read_bytes(found + "/tokenizer.json"), test::read_bytes(tokenizer));
  // transformers' AutoTokenizer needs the class and the special tokens named.
  const std::string tokenizer_config = test::read_bytes(found + "/tokenizer_config.json");
  EXPECT_NE(tokenizer_config.find("\"tokenizer_class\": \"PreTrainedTokenizerFast\""), std::string::npos);

  RunState loaded(2);
  const LoadedCheckpoint back = load_checkpoint(found, loaded.params, loaded.optimizer, loaded.balancing);
  const size_t bytes = size_t(saved.params.table().total_floats()) * 4;
  EXPECT_EQ(std::memcmp(loaded.params.values(), saved.params.values(), bytes), 0);
  for (const ParamAssignment& a : saved.optimizer.assignments()) {
    EXPECT_EQ(std::memcmp(loaded.optimizer.first_moment(*a.param), saved.optimizer.first_moment(*a.param),
                          size_t(a.param->numel()) * 4),
              0);
    if (a.optimizer == OptimizerKind::AdamW) {
      EXPECT_EQ(std::memcmp(loaded.optimizer.second_moment(*a.param), saved.optimizer.second_moment(*a.param),
                            size_t(a.param->numel()) * 4),
                0);
    }
  }
  EXPECT_EQ(loaded.balancing.first_moment(), saved.balancing.first_moment());
  EXPECT_EQ(loaded.optimizer.steps_taken(), 10);
  EXPECT_EQ(loaded.balancing.steps(), 3);
  EXPECT_EQ(back.state.step, 20);
  EXPECT_EQ(back.state.loader, saved.state(20).loader);
  EXPECT_EQ(back.state.bad_steps, 2);
  // The run's precision, which precision "auto" resumes with, read alone too.
  EXPECT_EQ(back.state.precision, "bf16");
  EXPECT_EQ(read_trainer_state(found).precision, "bf16");
  EXPECT_EQ(back.config.hidden_size, saved.config.hidden_size);
  // The checkpoint is a model directory transformers' layout: load_model reads it as one.
  EXPECT_EQ(load_model(found).params->table().total_floats(), saved.params.table().total_floats());
}

// A checkpoint from before the precision was recorded has none (auto then measures again); a recorded one
// that is not a precision is damage named by its field.
TEST(Checkpoint, RecordsThePrecisionOfTheRun) {
  test::TempDir dir;
  RunState saved(1);
  TrainerState state = saved.state(20);
  state.precision.clear();
  write_checkpoint(take_snapshot(saved.config, saved.params, saved.optimizer, saved.balancing, state, ""),
                   dir.path(), 3);
  const std::string found = find_checkpoint(dir.path());
  EXPECT_EQ(read_trainer_state(found).precision, "");
  const std::string path = found + "/trainer_state.json";
  std::string text = test::read_bytes(path);
  text.insert(text.find('{') + 1, "\"precision\": \"fp16\",");
  test::write_bytes(path, text);
  try {
    read_trainer_state(found);
    ADD_FAILURE() << "fp16 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("field 'precision'"), std::string::npos) << e.what();
  }
}

// Expert parallelism: a rank holding some experts loads their rows of the model and their optimizer state,
// which is kept per expert, and also from the whole [E, ...] state tensors that earlier versions wrote.
TEST(Checkpoint, ExpertStateLoadsIntoAStoreOfSomeExpertsInBothLayouts) {
  test::TempDir dir;
  RunState saved(1);
  const ModelDims dims = saved.params.dims();
  const int64_t half = dims.experts / 2;
  const CheckpointSnapshot per_expert =
      take_snapshot(saved.config, saved.params, saved.optimizer, saved.balancing, saved.state(20), "");
  CheckpointSnapshot whole = per_expert;
  for (const ParamInfo& param : saved.params.table().params()) {
    if (param.role != ParamRole::ExpertWeight) continue;
    for (const std::string prefix : {"exp_avg.", "exp_avg_sq."}) {
      std::vector<float> joined;
      for (int64_t e = 0; e < dims.experts; ++e) {
        const std::string name = prefix + param.name + "." + std::to_string(e);
        const auto it = std::find_if(whole.tensors.begin(), whole.tensors.end(),
                                     [&](const auto& tensor) { return tensor.first == name; });
        if (it == whole.tensors.end()) break;  // a Muon parameter has no second moment
        joined.insert(joined.end(), it->second.begin(), it->second.end());
        whole.tensors.erase(it);
      }
      if (!joined.empty()) whole.tensors.emplace_back(prefix + param.name, std::move(joined));
    }
  }
  ASSERT_LT(whole.tensors.size(), per_expert.tensors.size());
  Optimizer& want = saved.optimizer;
  for (const auto& [name, snapshot] :
       {std::pair{"per_expert", &per_expert}, std::pair{"whole", &std::as_const(whole)}}) {
    SCOPED_TRACE(name);
    write_checkpoint(*snapshot, dir.file(name), 1);
    ParameterStore part(dims, {half, half});
    Optimizer optimizer(part, {}, cpu_ops());
    BalancingController balancing({}, 2, 4);
    load_checkpoint(find_checkpoint(dir.file(name)), part, optimizer, balancing);
    for (const ParamAssignment& a : optimizer.assignments()) {
      const ParamInfo& full = saved.params.table().at(a.param->name);
      const int64_t skip =
          a.param->role == ParamRole::ExpertWeight ? half * (full.numel() / dims.experts) : 0;
      const size_t bytes = size_t(a.param->numel()) * 4;
      EXPECT_EQ(std::memcmp(part.value(*a.param), saved.params.value(full) + skip, bytes), 0) << full.name;
      EXPECT_EQ(std::memcmp(optimizer.first_moment(*a.param), want.first_moment(full) + skip, bytes), 0)
          << full.name;
      if (a.optimizer == OptimizerKind::AdamW) {
        EXPECT_EQ(std::memcmp(optimizer.second_moment(*a.param), want.second_moment(full) + skip, bytes), 0)
            << full.name;
      }
    }
  }
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

  // A write that died half way (a temporary directory) is ignored, and so is a step directory that holds
  // another step (a copy), or one whose name only starts with digits.
  fs::create_directories(dir.file("checkpoints/.step_50.tmp.123"));
  fs::copy(dir.file("checkpoints/step_30"), dir.file("checkpoints/step_50"));
  fs::copy(dir.file("checkpoints/step_30"), dir.file("checkpoints/step_60.replaced-1"));
  EXPECT_THROW(verify_checkpoint(dir.file("checkpoints/step_50")), Error);
  EXPECT_EQ(fs::path(find_checkpoint(dir.path())).filename(), "step_30");

  fs::remove(dir.file("checkpoints/step_30/trainer_state.json"));
  fs::remove(dir.file("checkpoints/step_20/checksums.json"));
  EXPECT_EQ(find_checkpoint(dir.path()), "");
  test::TempDir empty;
  EXPECT_EQ(find_checkpoint(empty.path()), "");
}

// `latest` is a hint: resume takes the newest checkpoint that verifies, whatever `latest` says, and says why.
TEST(Checkpoint, ResumeTrustsTheCheckpointsNotLatest) {
  test::TempDir dir;
  RunState run(1);
  for (int64_t step : {10, 20, 30})
    write_checkpoint(take_snapshot(run.config, run.params, run.optimizer, run.balancing, run.state(step), ""),
                     dir.path(), 5);
  auto choice = [&] { return choose_checkpoint(dir.path()); };
  EXPECT_EQ(fs::path(choice().path).filename(), "step_30");
  EXPECT_NE(choice().reason.find("as checkpoints/latest says"), std::string::npos) << choice().reason;

  const std::string latest = dir.file("checkpoints/latest");
  for (const std::string damage : {"garbage\n", "", "step_\n", "../../etc\n"}) {
    test::write_bytes(latest, damage);
    EXPECT_EQ(fs::path(choice().path).filename(), "step_30") << "latest: '" << damage << "'";
    EXPECT_NE(choice().reason.find("names no checkpoint"), std::string::npos) << choice().reason;
  }
  test::write_bytes(latest, "step_10\n");  // a run that stopped between publishing step 30 and naming it
  EXPECT_EQ(fs::path(choice().path).filename(), "step_30");
  EXPECT_NE(choice().reason.find("older step_10"), std::string::npos) << choice().reason;
  test::write_bytes(latest, "step_90\n");
  EXPECT_EQ(fs::path(choice().path).filename(), "step_30");
  EXPECT_NE(choice().reason.find("missing or damaged"), std::string::npos) << choice().reason;
  fs::remove(latest);
  EXPECT_EQ(fs::path(choice().path).filename(), "step_30");
  EXPECT_NE(choice().reason.find("missing"), std::string::npos) << choice().reason;
}

// A run that resumed from an older checkpoint (the newer ones did not verify) never deletes the newer ones:
// rotation keeps the newest `keep` up to the step written, and a step directory in the way is set aside.
TEST(Checkpoint, RotationNeverDeletesNewerCheckpoints) {
  test::TempDir dir;
  RunState run(1);
  auto write = [&](int64_t step) {
    write_checkpoint(take_snapshot(run.config, run.params, run.optimizer, run.balancing, run.state(step), ""),
                     dir.path(), 2);
  };
  for (int64_t step : {10, 20, 30, 40}) write(step);
  // step_40 damaged: resume goes to step_30 and training goes on from there.
  test::write_bytes(dir.file("checkpoints/step_40/trainer_state.json"), "{}");
  ASSERT_EQ(fs::path(find_checkpoint(dir.path())).filename(), "step_30");
  write(33);
  write(36);
  EXPECT_TRUE(fs::exists(dir.file("checkpoints/step_40"))) << "newer than the step written";
  EXPECT_TRUE(fs::exists(dir.file("checkpoints/step_36")));
  EXPECT_TRUE(fs::exists(dir.file("checkpoints/step_33")));
  EXPECT_FALSE(fs::exists(dir.file("checkpoints/step_30")));
  // Reaching step 40 again: the damaged directory is kept under another name, the new one published.
  write(40);
  EXPECT_EQ(fs::path(find_checkpoint(dir.path())).filename(), "step_40");
  int set_aside = 0;
  for (const auto& entry : fs::directory_iterator(dir.file("checkpoints")))
    set_aside += entry.path().filename().string().starts_with("step_40.replaced-");
  EXPECT_EQ(set_aside, 1);
}

// A trainer state whose data position does not add up (its checksums recomputed, as a tool that edited it
// would) is damaged: resume would seek for ever to a window past the data. The one before is used.
TEST(Checkpoint, AnInconsistentDataPositionIsDamage) {
  test::TempDir dir;
  RunState run(1);
  for (int64_t step : {10, 20})
    write_checkpoint(take_snapshot(run.config, run.params, run.optimizer, run.balancing, run.state(step), ""),
                     dir.path(), 5);
  const std::string state_path = dir.file("checkpoints/step_20/trainer_state.json");
  std::string state = test::read_bytes(state_path);
  const size_t at = state.find("\"samples\": 77");
  ASSERT_NE(at, std::string::npos) << state;
  state.replace(at, std::strlen("\"samples\": 77"), "\"samples\": 1000000000000000000");
  test::write_bytes(state_path, state);
  const std::string listing_path = dir.file("checkpoints/step_20/checksums.json");
  std::string listing = test::read_bytes(listing_path);
  const size_t entry = listing.find("\"trainer_state.json\": \"") + std::strlen("\"trainer_state.json\": \"");
  char crc[16];
  std::snprintf(
      crc, sizeof crc, "%08lx",
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(state.data()), uInt(state.size())));
  listing.replace(entry, 8, crc);
  test::write_bytes(listing_path, listing);

  try {
    verify_checkpoint(dir.file("checkpoints/step_20"));
    FAIL() << "accepted samples that the datasets drawn do not add up to";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data position is inconsistent"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fs::path(find_checkpoint(dir.path())).filename(), "step_10");
}

TEST(Checkpoint, BackgroundWriterPublishesOnceDoneAndReportsErrors) {
  test::TempDir dir;
  RunState run(1);
  const std::unique_ptr<Communicator> comm = make_single_process_communicator();
  CheckpointWriter writer(dir.path(), 2, *comm);
  const std::string published =
      writer.start(take_snapshot(run.config, run.params, run.optimizer, run.balancing, run.state(7), ""));
  EXPECT_EQ(fs::path(published).filename(), "step_7");
  writer.finish();
  EXPECT_EQ(find_checkpoint(dir.path()), published);

  test::write_bytes(dir.file("file"), "x");
  CheckpointWriter failing(dir.file("file"), 2, *comm);  // the run directory is a file: nothing can be made
  failing.start(take_snapshot(run.config, run.params, run.optimizer, run.balancing, run.state(1), ""));
  EXPECT_THROW(failing.finish(), Error);
}

// ZeRO-1 checkpoints: shards written by two ranks load into one optimizer that owns everything, and into
// any shard of another rank count.
TEST(Checkpoint, ShardsWrittenAtTwoRanksLoadAtAnyRankCount) {
  test::TempDir dir;
  RunState saved(1);
  const int64_t floats = saved.params.table().total_floats();
  const std::string temp = checkpoint_temp_dir(dir.path(), 20);
  fs::create_directories(temp);
  FileChecksums files;
  const int64_t dense = saved.params.table().dense_floats();
  const auto& assignments = saved.optimizer.assignments();
  const OptimizerShards two = plan_optimizer_shards(assignments, 0, dense, 2),
                        two_experts = plan_optimizer_shards(assignments, dense, floats, 2);
  for (int rank = 0; rank < 2; ++rank) {
    Optimizer shard(saved.params, {}, cpu_ops(), {two.range(rank), two_experts.range(rank)});
    shard.set_steps_taken(saved.optimizer.steps_taken());
    for (const ParamAssignment& a : shard.assignments()) {
      if (!shard.owns(*a.param)) continue;
      const size_t bytes = size_t(a.param->numel()) * 4;
      std::memcpy(shard.first_moment(*a.param), saved.optimizer.first_moment(*a.param), bytes);
      if (a.optimizer == OptimizerKind::AdamW)
        std::memcpy(shard.second_moment(*a.param), saved.optimizer.second_moment(*a.param), bytes);
    }
    const FileChecksums mine = write_checkpoint_files(
        take_snapshot(saved.config, saved.params, shard, saved.balancing, saved.state(20), "", rank, 2),
        temp);
    files.insert(files.end(), mine.begin(), mine.end());
  }
  publish_checkpoint(temp, 20, files, dir.path(), 2);
  const std::string found = find_checkpoint(dir.path());
  ASSERT_EQ(fs::path(found).filename(), "step_20");
  EXPECT_TRUE(fs::exists(found + "/optimizer-00001-of-00002.safetensors"));
  // Each rank wrote one shard of the model, rank 0 the index: a sharded Hugging Face model directory.
  EXPECT_TRUE(fs::exists(found + "/model-00002-of-00002.safetensors"));
  EXPECT_TRUE(fs::exists(found + "/model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(found + "/model.safetensors"));

  RunState whole(2);
  load_checkpoint(found, whole.params, whole.optimizer, whole.balancing);
  EXPECT_EQ(std::memcmp(whole.params.values(), saved.params.values(), size_t(floats) * 4), 0);
  const OptimizerShards three = plan_optimizer_shards(assignments, 0, dense, 3),
                        three_experts = plan_optimizer_shards(assignments, dense, floats, 3);
  RunState other(3);
  Optimizer third(other.params, {}, cpu_ops(), {three.range(1), three_experts.range(1)});
  load_checkpoint(found, other.params, third, other.balancing);
  for (const ParamAssignment& a : saved.optimizer.assignments()) {
    const size_t bytes = size_t(a.param->numel()) * 4;
    EXPECT_EQ(
        std::memcmp(whole.optimizer.first_moment(*a.param), saved.optimizer.first_moment(*a.param), bytes),
        0);
    if (third.owns(*a.param)) {
      EXPECT_EQ(std::memcmp(third.first_moment(*a.param), saved.optimizer.first_moment(*a.param), bytes), 0);
      if (a.optimizer == OptimizerKind::AdamW) {
        EXPECT_EQ(std::memcmp(third.second_moment(*a.param), saved.optimizer.second_moment(*a.param), bytes),
                  0);
      }
    }
  }
  EXPECT_EQ(whole.balancing.first_moment(), saved.balancing.first_moment());
  EXPECT_EQ(other.balancing.first_moment(), saved.balancing.first_moment());
}

}  // namespace
}  // namespace zaya
