#include "train/checkpoint.h"

#include <zlib.h>

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/safetensors_index.h"
#include "model/model_io.h"
#include "optim/balancing.h"
#include "optim/optimizer.h"

namespace zaya {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kLatest = "latest";
constexpr const char* kOptimizerFile = "optimizer.safetensors";
constexpr const char* kStateFile = "trainer_state.json";
constexpr const char* kChecksumFile = "checksums.json";

std::string checksum_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read").file(path);
  uLong crc = crc32(0L, Z_NULL, 0);
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buffer.data()), uInt(in.gcount()));
  }
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08lx", static_cast<unsigned long>(crc));
  return hex;
}

json state_to_json(const TrainerState& s, int64_t optimizer_steps, int64_t balancing_steps) {
  return {{"step", s.step},
          {"tokens", s.tokens},
          {"stage", s.stage},
          {"stage_tokens", s.stage_tokens},
          {"bad_steps", s.bad_steps},
          {"seconds", s.seconds},
          {"optimizer_steps", optimizer_steps},
          {"balancing_steps", balancing_steps},
          {"loader", {{"stage", s.loader.stage}, {"samples", s.loader.samples}, {"drawn", s.loader.drawn}}},
          {"zaya_version", ZAYA_VERSION}};
}

int64_t step_of(const fs::path& dir) {
  const std::string name = dir.filename().string();
  if (!name.starts_with("step_")) return -1;
  try {
    return std::stoll(name.substr(5));
  } catch (const std::exception&) {
    return -1;
  }
}

}  // namespace

CheckpointSnapshot take_snapshot(const ZayaConfig& config, const ParameterStore& params, Optimizer& optimizer,
                                 BalancingController& balancing, const TrainerState& state,
                                 const std::string& tokenizer_path) {
  CheckpointSnapshot snapshot;
  snapshot.config = config;
  snapshot.config.dtype = "float32";  // resume is exact only from the weights as they are
  snapshot.state = state;
  snapshot.optimizer_steps = optimizer.steps_taken();
  snapshot.balancing_steps = balancing.steps();
  snapshot.tokenizer_path = tokenizer_path;
  for (const ParamInfo& param : params.table().params()) {
    const float* values = params.value(param);
    snapshot.tensors.emplace_back(param.name, std::vector<float>(values, values + param.numel()));
  }
  snapshot.model_tensors = snapshot.tensors.size();
  for (const ParamAssignment& a : optimizer.assignments()) {
    const float* m = optimizer.first_moment() + a.param->offset;
    snapshot.tensors.emplace_back("exp_avg." + a.param->name, std::vector<float>(m, m + a.param->numel()));
    if (a.optimizer == OptimizerKind::AdamW) {
      const float* v = optimizer.second_moment() + a.param->offset;
      snapshot.tensors.emplace_back("exp_avg_sq." + a.param->name,
                                    std::vector<float>(v, v + a.param->numel()));
    }
  }
  snapshot.tensors.emplace_back("balancing.exp_avg", balancing.first_moment());
  snapshot.tensors.emplace_back("balancing.exp_avg_sq", balancing.second_moment());
  return snapshot;
}

void write_checkpoint(const CheckpointSnapshot& snapshot, const std::string& run_dir, int keep) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  fs::create_directories(root);
  const std::string name = "step_" + std::to_string(snapshot.state.step);
  const fs::path temp = root / ("." + name + ".tmp." + std::to_string(::getpid()));
  fs::remove_all(temp);
  fs::create_directories(temp);

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
  for (size_t i = 0; i < model.size(); ++i) model[i].second.shape = table.params()[i].shape;
  write_weight_set(temp.string(), model, size_t(5) << 30, {{"format", "pt"}});
  save_config(snapshot.config, (temp / "config.json").string());
  write_generation_config(snapshot.config, (temp / "generation_config.json").string());
  if (!snapshot.tokenizer_path.empty()) {
    write_file_atomic((temp / "tokenizer.json").string(), read_text_file(snapshot.tokenizer_path));
  }
  SafetensorsWriter optimizer;
  for (auto& [tensor_name, view] : views(snapshot.model_tensors, snapshot.tensors.size()))
    optimizer.add(tensor_name, view);
  optimizer.write((temp / kOptimizerFile).string());
  write_file_atomic(
      (temp / kStateFile).string(),
      state_to_json(snapshot.state, snapshot.optimizer_steps, snapshot.balancing_steps).dump(2) + "\n");

  json checksums = json::object();
  for (const auto& entry : fs::directory_iterator(temp)) {
    checksums[entry.path().filename().string()] = checksum_of(entry.path().string());
  }
  write_file_atomic((temp / kChecksumFile).string(), checksums.dump(2) + "\n");
  sync_directory(temp.string());

  const fs::path final_dir = root / name;
  fs::remove_all(final_dir);
  fs::rename(temp, final_dir);
  sync_directory(root.string());
  write_file_atomic((root / kLatest).string(), name + "\n");

  std::vector<std::pair<int64_t, fs::path>> all;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory() && step_of(entry.path()) >= 0)
      all.emplace_back(step_of(entry.path()), entry.path());
  }
  std::sort(all.rbegin(), all.rend());
  for (size_t i = size_t(keep); i < all.size(); ++i) fs::remove_all(all[i].second);
}

CheckpointWriter::CheckpointWriter(std::string run_dir, int keep)
    : run_dir_(std::move(run_dir)), keep_(keep) {}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::write_async(CheckpointSnapshot snapshot) {
  wait();
  thread_ = std::thread([this, snapshot = std::move(snapshot)] {
    try {
      write_checkpoint(snapshot, run_dir_, keep_);
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

void CheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void verify_checkpoint(const std::string& checkpoint_dir) {
  const fs::path dir(checkpoint_dir);
  const std::string listing = (dir / kChecksumFile).string();
  json checksums;
  try {
    checksums = json::parse(read_text_file(listing));
  } catch (const json::exception& e) {
    throw Error(std::string("not valid JSON: ") + e.what()).file(listing);
  }
  for (const char* required : {"config.json", kOptimizerFile, kStateFile}) {
    if (!checksums.contains(required)) throw Error(std::string("does not list ") + required).file(listing);
  }
  for (const auto& [file, want] : checksums.items()) {
    const std::string path = (dir / file).string();
    if (!fs::exists(path)) throw Error("missing").file(path);
    if (!want.is_string() || checksum_of(path) != want.get<std::string>())
      throw Error("checksum mismatch").file(path);
  }
}

std::string find_checkpoint(const std::string& run_dir) {
  const fs::path root = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(root)) return "";
  std::vector<std::pair<int64_t, fs::path>> candidates;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (entry.is_directory() && step_of(entry.path()) >= 0)
      candidates.emplace_back(step_of(entry.path()), entry.path());
  }
  std::sort(candidates.rbegin(), candidates.rend());
  // `latest` names the newest complete write; a directory newer than it was never finished.
  std::error_code ignored;
  if (fs::exists(root / kLatest, ignored)) {
    std::string latest = read_text_file((root / kLatest).string());
    latest.erase(latest.find_last_not_of(" \n\r\t") + 1);
    const int64_t latest_step = step_of(root / latest);
    std::erase_if(candidates, [&](const auto& c) { return c.first > latest_step; });
  }
  for (const auto& [step, path] : candidates) {
    try {
      verify_checkpoint(path.string());
      return path.string();
    } catch (const Error& e) {
      std::fprintf(stderr, "zaya: checkpoint %s is damaged (%s); trying the one before it\n", path.c_str(),
                   e.what());
    }
  }
  return "";
}

LoadedCheckpoint load_checkpoint(const std::string& checkpoint_dir, ParameterStore& params,
                                 Optimizer& optimizer, BalancingController& balancing) {
  const fs::path dir(checkpoint_dir);
  LoadedCheckpoint out;
  out.config = load_config((dir / "config.json").string());
  load_weights(checkpoint_dir, params, out.config.tie_word_embeddings);

  const SafetensorsFile file((dir / kOptimizerFile).string());
  auto restore = [&](const std::string& name, float* into, size_t count) {
    const SafetensorsEntry* entry = file.find(name);
    if (!entry || entry->dtype != DType::F32 || size_t(entry->shape.numel()) != count) {
      throw Error("missing, or not f32 of the expected size").file(file.path()).tensor(name);
    }
    convert_to_f32(file.view(*entry), into);
  };
  for (const ParamAssignment& a : optimizer.assignments()) {
    restore("exp_avg." + a.param->name, optimizer.first_moment() + a.param->offset, size_t(a.param->numel()));
    if (a.optimizer == OptimizerKind::AdamW) {
      restore("exp_avg_sq." + a.param->name, optimizer.second_moment() + a.param->offset,
              size_t(a.param->numel()));
    }
  }
  restore("balancing.exp_avg", balancing.first_moment().data(), balancing.first_moment().size());
  restore("balancing.exp_avg_sq", balancing.second_moment().data(), balancing.second_moment().size());

  const std::string state_path = (dir / kStateFile).string();
  try {
    const json s = json::parse(read_text_file(state_path));
    TrainerState& t = out.state;
    t.step = s.at("step").get<int64_t>();
    t.tokens = s.at("tokens").get<int64_t>();
    t.stage = s.at("stage").get<int64_t>();
    t.stage_tokens = s.at("stage_tokens").get<int64_t>();
    t.bad_steps = s.at("bad_steps").get<int64_t>();
    t.seconds = s.at("seconds").get<double>();
    t.loader.stage = s.at("loader").at("stage").get<int64_t>();
    t.loader.samples = s.at("loader").at("samples").get<int64_t>();
    t.loader.drawn = s.at("loader").at("drawn").get<std::vector<int64_t>>();
    optimizer.set_steps_taken(s.at("optimizer_steps").get<int64_t>());
    balancing.steps() = s.at("balancing_steps").get<int64_t>();
  } catch (const json::exception& e) {
    throw Error(std::string("malformed: ") + e.what()).file(state_path);
  }
  return out;
}

}  // namespace zaya
