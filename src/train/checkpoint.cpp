#include "train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/precision.h"
#include "data/model_tokenizer_files.h"
#include "dist/communicator.h"
#include "io/atomic_file.h"
#include "io/json_input.h"
#include "io/safetensors.h"
#include "io/safetensors_index.h"
#include "model/model_io.h"
#include "optim/balancing.h"
#include "optim/optimizer.h"

namespace zaya {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json state_to_json(const TrainerState& s, int64_t optimizer_steps, int64_t balancing_steps, int ranks) {
  json out = {
      {"step", s.step},
      {"tokens", s.tokens},
      {"stage", s.stage},
      {"stage_tokens", s.stage_tokens},
      {"bad_steps", s.bad_steps},
      {"seconds", s.seconds},
      {"optimizer_steps", optimizer_steps},
      {"balancing_steps", balancing_steps},
      {"loader", {{"stage", s.loader.stage}, {"samples", s.loader.samples}, {"drawn", s.loader.drawn}}},
      {"ranks", ranks},
      {"zaya_version", ZAYA_VERSION}};
  if (!s.precision.empty()) out["precision"] = s.precision;
  if (!s.settings.empty()) out["settings"] = s.settings;
  return out;
}

// The precision field of a parsed trainer state: optional, one of the two names.
std::string precision_of_state(const json& state, const std::string& path) {
  if (!state.contains("precision")) return "";
  const json& value = state.at("precision");
  if (!value.is_string() || !precision_from_name(value.get<std::string>()))
    throw Error("expected \"fp32\" or \"bf16\"").file(path).field("precision");
  return value.get<std::string>();
}

// The model's tensors in table order, cut into at most `ranks` consecutive groups of about equal bytes:
// [groups + 1] indices into the table. Rank r writes group r.
std::vector<size_t> model_groups(const ParameterTable& table, int ranks) {
  const std::vector<ParamInfo>& params = table.params();
  int64_t total = 0, done = 0;
  for (const ParamInfo& param : params) total += param.numel();
  std::vector<size_t> starts = {0};
  for (size_t i = 0; i < params.size(); ++i) {
    done += params[i].numel();
    const bool cut = done * ranks >= total * int64_t(starts.size());
    if (cut && i + 1 < params.size() && int(starts.size()) < ranks) starts.push_back(i + 1);
  }
  starts.push_back(params.size());
  return starts;
}

// The name of an expert's slice of an expert weight's optimizer state.
std::string expert_state_name(const std::string& name, int64_t expert) {
  return name + "." + std::to_string(expert);
}

// Rank `writer` of the world gets the whole tensor [E, ...] from the slices [E / P, ...] of the ranks of
// its expert group (consecutive runs of P ranks, in expert order); the other groups pass nothing.
std::vector<float> gather_experts(Communicator& group, int rank, int writer, const float* mine,
                                  int64_t count) {
  const int P = group.size();
  const bool my_group = writer / P == rank / P, me = writer == rank;
  std::vector<int64_t> send(size_t(P), 0), recv(size_t(P), 0);
  if (my_group) send[size_t(writer % P)] = count;
  if (me) recv.assign(size_t(P), count);
  std::vector<float> all(me ? size_t(count * P) : 0);
  group.all_to_all(mine, send, all.data(), recv);
  return all;
}

}  // namespace

CheckpointSnapshot take_snapshot(const ZayaConfig& config, const ParameterStore& params, Optimizer& optimizer,
                                 BalancingController& balancing, const TrainerState& state,
                                 const std::string& tokenizer_path, int rank, int ranks,
                                 Communicator* expert_group) {
  CheckpointSnapshot snapshot;
  snapshot.rank = rank;
  snapshot.ranks = ranks;
  snapshot.config = config;
  snapshot.config.dtype = "float32";  // resume is exact only from the weights as they are
  snapshot.state = state;
  snapshot.optimizer_steps = optimizer.steps_taken();
  snapshot.balancing_steps = balancing.steps();
  snapshot.tokenizer_path = tokenizer_path;
  // Shards are planned on transformers' shapes, which every rank agrees on whatever experts it holds.
  const std::vector<size_t> groups = model_groups(ParameterTable(params.dims()), ranks);
  const size_t first = groups[std::min(size_t(rank), groups.size() - 1)],
               last = groups[std::min(size_t(rank) + 1, groups.size() - 1)];
  snapshot.first_model_param = first;
  const std::vector<ParamInfo>& table = params.table().params();
  for (size_t i = 0; i < table.size(); ++i) {
    const ParamInfo& param = table[i];
    if (param.shape == param.model_shape) {
      if (i >= first && i < last) snapshot.tensors.emplace_back(param.name, params.read_value(param));
      continue;
    }
    if (!expert_group)
      throw Error("a store of some experts needs its expert group to be saved").tensor(param.name);
    const int writer = int(std::upper_bound(groups.begin(), groups.end(), i) - groups.begin()) - 1;
    const std::vector<float> held = params.read_value(param);
    std::vector<float> all = gather_experts(*expert_group, rank, writer, held.data(), param.numel());
    if (writer == rank) snapshot.tensors.emplace_back(param.name, std::move(all));
  }
  snapshot.model_tensors = snapshot.tensors.size();
  for (const ParamAssignment& a : optimizer.assignments()) {
    if (!optimizer.owns(*a.param)) continue;
    const ParamInfo& param = *a.param;
    // Expert weights' state is kept per expert, so that it loads under any split of the experts.
    const bool per_expert = param.role == ParamRole::ExpertWeight;
    const int64_t pieces = per_expert ? param.shape[0] : 1, piece = param.numel() / pieces;
    auto add = [&](const std::string& prefix, const float* state) {
      for (int64_t j = 0; j < pieces; ++j) {
        const std::string name =
            per_expert ? expert_state_name(prefix + param.name, params.table().experts().first + j)
                       : prefix + param.name;
        std::vector<float> values(static_cast<size_t>(piece));
        params.memory().copy_to_host(values.data(), state + j * piece, size_t(piece) * sizeof(float));
        snapshot.tensors.emplace_back(name, std::move(values));
      }
    };
    add("exp_avg.", optimizer.first_moment(param));
    if (a.optimizer == OptimizerKind::AdamW) add("exp_avg_sq.", optimizer.second_moment(param));
  }
  if (rank == 0) {
    snapshot.tensors.emplace_back("balancing.exp_avg", balancing.first_moment());
    snapshot.tensors.emplace_back("balancing.exp_avg_sq", balancing.second_moment());
  }
  return snapshot;
}

FileChecksums write_checkpoint_files(const CheckpointSnapshot& snapshot, const std::string& dir) {
  const fs::path temp(dir);
  std::vector<std::string> written;
  auto views = [&](size_t begin, size_t end) {
    std::vector<std::pair<std::string, TensorView>> out;
    for (size_t i = begin; i < end; ++i) {
      const auto& [tensor_name, values] = snapshot.tensors[i];
      out.emplace_back(tensor_name,
                       TensorView{const_cast<float*>(values.data()), DType::F32, {int64_t(values.size())}});
    }
    return out;
  };
  // The model with its real shapes, so that the directory is a Hugging Face model as it stands.
  const ParameterTable table(model_dims(snapshot.config));
  std::vector<std::pair<std::string, TensorView>> model = views(0, snapshot.model_tensors);
  for (size_t i = 0; i < model.size(); ++i)
    model[i].second.shape = table.params()[snapshot.first_model_param + i].shape;
  const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  if (snapshot.ranks == 1) {
    written = write_weight_set(temp.string(), model, size_t(5) << 30, metadata);
  } else {
    const std::vector<size_t> groups = model_groups(table, snapshot.ranks);
    const size_t shards = groups.size() - 1;
    if (size_t(snapshot.rank) < shards)
      written.push_back(write_weight_shard(temp.string(), size_t(snapshot.rank), shards, model, metadata));
    if (snapshot.rank == 0) {
      std::vector<std::pair<std::string, size_t>> weight_map;
      size_t bytes = 0;
      for (size_t g = 0; g < shards; ++g) {
        for (size_t i = groups[g]; i < groups[g + 1]; ++i) {
          weight_map.emplace_back(table.params()[i].name, g);
          bytes += size_t(table.params()[i].numel()) * sizeof(float);
        }
      }
      written.push_back(write_weight_index(temp.string(), weight_map, shards, bytes));
    }
  }
  if (snapshot.rank == 0) {
    save_config(snapshot.config, (temp / "config.json").string());
    write_generation_config(snapshot.config, (temp / "generation_config.json").string());
    written.insert(written.end(), {"config.json", "generation_config.json", kCheckpointStateFile});
    if (!snapshot.tokenizer_path.empty()) {
      write_model_tokenizer(temp.string(), snapshot.tokenizer_path, snapshot.config.max_position_embeddings);
      written.insert(written.end(), {"tokenizer.json", "tokenizer_config.json"});
    }
    write_file_atomic(
        (temp / kCheckpointStateFile).string(),
        state_to_json(snapshot.state, snapshot.optimizer_steps, snapshot.balancing_steps, snapshot.ranks)
                .dump(2) +
            "\n");
  }
  char shard_name[64];
  std::snprintf(shard_name, sizeof shard_name, "%s-%05d-of-%05d.safetensors", kCheckpointOptimizerPrefix,
                snapshot.rank, snapshot.ranks);
  SafetensorsWriter optimizer;
  for (auto& [tensor_name, view] : views(snapshot.model_tensors, snapshot.tensors.size()))
    optimizer.add(tensor_name, view);
  optimizer.write((temp / shard_name).string());
  written.push_back(shard_name);

  FileChecksums checksums;
  for (const std::string& name : written) checksums.emplace_back(name, file_checksum((temp / name).string()));
  return checksums;
}

void write_checkpoint(const CheckpointSnapshot& snapshot, const std::string& run_dir, int keep) {
  const std::string temp = checkpoint_temp_dir(run_dir, snapshot.state.step);
  fs::remove_all(temp);
  fs::create_directories(temp);
  publish_checkpoint(temp, snapshot.state.step, write_checkpoint_files(snapshot, temp), run_dir, keep);
}

LoadedCheckpoint load_checkpoint(const std::string& checkpoint_dir, ParameterStore& params,
                                 Optimizer& optimizer, BalancingController& balancing) {
  const fs::path dir(checkpoint_dir);
  LoadedCheckpoint out;
  out.config = load_config((dir / "config.json").string());
  load_weights(checkpoint_dir, params, out.config.tie_word_embeddings);

  // The shards were written at some rank count; each tensor is looked up in all of them.
  std::vector<std::unique_ptr<SafetensorsFile>> shards;
  for (const std::string& name : listed_optimizer_shards(checkpoint_dir))
    shards.push_back(std::make_unique<SafetensorsFile>((dir / name).string()));
  // `count` floats from element `skip` on of the tensor `name`, which must be f32 of `size` elements, into
  // `memory` (the optimizer state's, or the host's); false when no shard has it.
  auto read = [&](const std::string& name, float* into, int64_t count, int64_t skip, int64_t size,
                  MemoryResource& memory) {
    for (const auto& shard : shards) {
      const SafetensorsEntry* entry = shard->find(name);
      if (!entry) continue;
      if (entry->dtype != DType::F32 || entry->shape.numel() != size)
        throw Error(cat("is not f32 of ", size, " elements")).file(shard->path()).tensor(name);
      const TensorView all = shard->view(*entry);
      memory.copy_from_host(into, static_cast<char*>(all.data) + size_t(skip) * sizeof(float),
                            size_t(count) * sizeof(float));
      return true;
    }
    return false;
  };
  auto restore = [&](const std::string& name, float* into, int64_t count, MemoryResource& memory) {
    if (!read(name, into, count, 0, count, memory))
      throw Error("is in no optimizer shard").file(checkpoint_dir).tensor(name);
  };
  for (const ParamAssignment& a : optimizer.assignments()) {
    if (!optimizer.owns(*a.param)) continue;
    const ParamInfo& param = *a.param;
    auto restore_param = [&](const std::string& name, float* into) {
      if (param.role != ParamRole::ExpertWeight) return restore(name, into, param.numel(), params.memory());
      // Per expert; checkpoints of earlier versions keep the whole [E, ...] tensor instead.
      const int64_t piece = param.numel() / param.shape[0];
      for (int64_t j = 0; j < param.shape[0]; ++j) {
        const int64_t expert = params.table().experts().first + j;
        if (!read(expert_state_name(name, expert), into + j * piece, piece, 0, piece, params.memory()) &&
            !read(name, into + j * piece, piece, param.model_offset + j * piece, param.model_shape.numel(),
                  params.memory()))
          throw Error("is in no optimizer shard")
              .file(checkpoint_dir)
              .tensor(expert_state_name(name, expert));
      }
    };
    restore_param("exp_avg." + param.name, optimizer.first_moment(param));
    if (a.optimizer == OptimizerKind::AdamW)
      restore_param("exp_avg_sq." + param.name, optimizer.second_moment(param));
  }
  restore("balancing.exp_avg", balancing.first_moment().data(), int64_t(balancing.first_moment().size()),
          host_memory());
  restore("balancing.exp_avg_sq", balancing.second_moment().data(), int64_t(balancing.second_moment().size()),
          host_memory());

  int64_t optimizer_steps = 0, balancing_steps = 0;
  out.state = read_trainer_state(checkpoint_dir, &optimizer_steps, &balancing_steps);
  optimizer.set_steps_taken(optimizer_steps);
  balancing.steps() = balancing_steps;
  return out;
}

TrainerState read_trainer_state(const std::string& checkpoint_dir, int64_t* optimizer_steps,
                                int64_t* balancing_steps) {
  const std::string state_path = (fs::path(checkpoint_dir) / kCheckpointStateFile).string();
  TrainerState t;
  try {
    const json s = parse_json(read_text_file(state_path), state_path);
    const auto integer = [&](const json& value, const char* field) {
      return json_int64(value, state_path, field);
    };
    t.step = integer(s.at("step"), "step");
    t.tokens = integer(s.at("tokens"), "tokens");
    t.stage = integer(s.at("stage"), "stage");
    t.stage_tokens = integer(s.at("stage_tokens"), "stage_tokens");
    t.bad_steps = integer(s.at("bad_steps"), "bad_steps");
    t.seconds = s.at("seconds").get<double>();
    t.loader.stage = integer(s.at("loader").at("stage"), "loader.stage");
    t.loader.samples = integer(s.at("loader").at("samples"), "loader.samples");
    t.loader.drawn = json_int64_array(s.at("loader").at("drawn"), state_path, "loader.drawn");
    if (optimizer_steps) *optimizer_steps = integer(s.at("optimizer_steps"), "optimizer_steps");
    if (balancing_steps) *balancing_steps = integer(s.at("balancing_steps"), "balancing_steps");
    t.precision = precision_of_state(s, state_path);
    if (s.contains("settings")) t.settings = s.at("settings").get<std::map<std::string, std::string>>();
  } catch (const json::exception& e) {
    throw Error(std::string("malformed: ") + e.what()).file(state_path);
  }
  return t;
}

}  // namespace zaya
