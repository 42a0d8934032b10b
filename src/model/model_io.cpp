#include "model/model_io.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "core/error.h"
#include "core/rng.h"
#include "io/atomic_file.h"
#include "io/safetensors_index.h"

namespace zaya {
namespace fs = std::filesystem;

namespace {

// Every parameter of `table` in `weights` with its shape and a float dtype, and no tensor the model lacks.
void check_weights(const std::string& dir, const ParameterTable& table, const WeightSet& weights,
                   bool tied_embeddings) {
  std::set<std::string> expected;
  for (const ParamInfo& param : table.params()) {
    expected.insert(param.name);
    const auto found = weights.find(param.name);
    if (!found.file) throw Error("the model directory lacks this parameter").file(dir).tensor(param.name);
    const SafetensorsEntry& entry = *found.entry;
    if (!(entry.shape == param.model_shape)) {
      throw Error(
          cat("shape ", entry.shape.to_string(), " but the config implies ", param.model_shape.to_string()))
          .file(found.file->path())
          .tensor(param.name);
    }
    if (!dtype_is_float(entry.dtype) || entry.dtype == DType::F8E4M3 || entry.dtype == DType::F8E5M2) {
      throw Error(cat("dtype ", dtype_name(entry.dtype), " is not supported (F32, BF16, F16 or F64 are)"))
          .file(found.file->path())
          .tensor(param.name);
    }
  }
  for (const std::string& name : weights.names()) {
    // A tied head may still be stored (some exporters do) when it equals the embedding (stores_own_head).
    if (!expected.count(name) && !(name == "lm_head.weight" && tied_embeddings)) {
      throw Error("the model has no parameter of this name").file(dir).tensor(name);
    }
  }
}

// Whether `weights` store an lm_head.weight that is not the embedding (in values, as read in f32): a config
// that ties the two (or leaves it to the default, tied) then does not hold for these weights. transformers
// loads such a directory untied, with the stored head; so does zaya. Compared a block of rows at a time.
bool stores_own_head(const WeightSet& weights) {
  const auto head = weights.find("lm_head.weight"), embed = weights.find("model.embed_tokens.weight");
  if (!head.file || !embed.file) return head.file != nullptr;
  if (!(head.entry->shape == embed.entry->shape) || head.entry->shape.rank() != 2) return true;
  const TensorView head_all = head.file->view(*head.entry), embed_all = embed.file->view(*embed.entry);
  const int64_t rows = head_all.shape[0], width = head_all.shape[1], block = 1024;
  std::vector<float> a(size_t(block * width)), b(size_t(block * width));
  for (int64_t first = 0; first < rows; first += block) {
    const int64_t count = std::min(block, rows - first);
    auto rows_of = [&](const TensorView& all) {
      return TensorView{static_cast<char*>(all.data) + size_t(first * width) * dtype_size(all.dtype),
                        all.dtype, Shape{count, width}};
    };
    convert_to_f32(rows_of(head_all), a.data());
    convert_to_f32(rows_of(embed_all), b.data());
    if (std::memcmp(a.data(), b.data(), size_t(count * width) * sizeof(float)) != 0) return true;
  }
  return false;
}

// Each parameter's values (all of the tensor, or the rows of this rank's experts) from checked weights.
void copy_weights(const WeightSet& weights, ParameterStore& params) {
  for (const ParamInfo& param : params.table().params()) {
    const auto found = weights.find(param.name);
    const TensorView all = found.file->view(*found.entry);
    const TensorView held{static_cast<char*>(all.data) + size_t(param.model_offset) * dtype_size(all.dtype),
                          all.dtype, param.shape};
    std::vector<float> values(size_t(param.numel()));
    convert_to_f32(held, values.data());
    params.write_value(param, values.data());
    // Read once: a load then holds the store and one tensor's pages of the files, not the whole files too.
    found.file->drop_pages(*found.entry);
  }
}

}  // namespace

LoadedModel load_model(const std::string& dir, ExpertValues expert_values) {
  if (!fs::is_directory(dir)) throw Error("not a model directory").file(dir);
  LoadedModel model;
  model.config = load_config((fs::path(dir) / "config.json").string());
  // Checked before the store is allocated: a config asking for more than the files hold (65,536 layers, a
  // one-line edit of a small model's) fails at once instead of after allocating its size (6.5 GB, 8 s).
  const WeightSet weights(dir);
  if (model.config.tie_word_embeddings && stores_own_head(weights)) model.config.tie_word_embeddings = false;
  const ModelDims dims = model_dims(model.config);
  ParameterTable table(dims);
  check_weights(dir, table, weights, model.config.tie_word_embeddings);
  model.params = std::make_unique<ParameterStore>(dims, std::move(table), host_memory(), expert_values);
  copy_weights(weights, *model.params);
  return model;
}

void load_weights(const std::string& dir, ParameterStore& params, bool tied_embeddings) {
  const WeightSet weights(dir);
  check_weights(dir, params.table(), weights, tied_embeddings);
  copy_weights(weights, params);
}

void write_generation_config(const ZayaConfig& config, const std::string& path) {
  nlohmann::json out = {{"_from_model_config", true}, {"use_cache", true}};
  if (config.bos_token_id) out["bos_token_id"] = *config.bos_token_id;
  if (config.pad_token_id) out["pad_token_id"] = *config.pad_token_id;
  if (config.eos_token_id_is_list || config.eos_token_id.size() > 1) {
    out["eos_token_id"] = config.eos_token_id;
  } else if (!config.eos_token_id.empty()) {
    out["eos_token_id"] = config.eos_token_id[0];
  }
  write_file_atomic(path, out.dump(2) + "\n");
}

std::vector<std::string> model_file_names(const ParameterTable& table, const SaveOptions& options) {
  std::vector<size_t> tensor_bytes;
  for (const ParamInfo& param : table.params()) {
    const bool bf16 = options.dtype == "bfloat16" && param.role != ParamRole::BalancingBias;
    tensor_bytes.push_back(size_t(param.numel()) * (bf16 ? sizeof(uint16_t) : sizeof(float)));
  }
  std::vector<std::string> names = weight_file_names(tensor_bytes, options.max_shard_bytes);
  names.insert(names.end(), {"config.json", "generation_config.json"});
  return names;
}

void save_model(const ZayaConfig& config, const ParameterStore& params, const std::string& dir,
                const SaveOptions& options) {
  if (options.dtype != "float32" && options.dtype != "bfloat16") {
    throw Error("expected float32 or bfloat16, got " + options.dtype).field("dtype");
  }
  if (!params.table().holds_all_experts())
    throw Error("a model directory needs every expert; this store holds some (expert parallelism)").file(dir);
  fs::create_directories(dir);
  const bool bf16 = options.dtype == "bfloat16";
  std::vector<Tensor> converted;  // bf16 copies; they must outlive the write
  std::vector<std::pair<std::string, TensorView>> tensors;
  for (const ParamInfo& param : params.table().params()) {
    TensorView view = params.value_view(param);
    // The balancing biases stay f32: they are a controller's state, and transformers keeps buffers f32.
    if (bf16 && param.role != ParamRole::BalancingBias) {
      converted.emplace_back(DType::BF16, param.shape);
      const float* from = params.value(param);
      uint16_t* to = converted.back().as<uint16_t>();
      for (int64_t i = 0; i < param.numel(); ++i) to[i] = f32_to_bf16(from[i]);
      view = converted.back().view();
    }
    tensors.emplace_back(param.name, view);
  }
  write_weight_set(dir, tensors, options.max_shard_bytes, {{"format", "pt"}});
  ZayaConfig saved = config;
  saved.dtype = options.dtype;
  save_config(saved, (fs::path(dir) / "config.json").string());
  write_generation_config(config, (fs::path(dir) / "generation_config.json").string());
}

void init_parameters(ParameterStore& params, double initializer_range, uint64_t seed, bool router_fan_in) {
  const ModelDims& dims = params.dims();
  const auto& table = params.table().params();
  for (size_t index = 0; index < table.size(); ++index) {
    const ParamInfo& param = table[index];
    float* values = params.value(param);
    const int64_t n = param.numel();
    auto fill = [&](float value) { std::fill(values, values + n, value); };
    switch (param.role) {
      case ParamRole::Embedding:
      case ParamRole::LmHead:
      case ParamRole::AttentionWeight:
      case ParamRole::ConvWeight:
      case ParamRole::RouterWeight:
      case ParamRole::ExpertWeight: {
        const RandomStream stream(seed, RngPurpose::ParameterInit, index);
        const bool fan_in = router_fan_in && param.role == ParamRole::RouterWeight;
        const float std =
            fan_in ? 1.0f / std::sqrt(float(param.shape[param.shape.rank() - 1])) : float(initializer_range);
        // A store of some experts draws what the whole tensor has in their rows.
        constexpr int64_t kChunk = 4096;
#pragma omp parallel for schedule(static)
        for (int64_t begin = 0; begin < n; begin += kChunk) {
          const int64_t count = std::min(kChunk, n - begin);
          stream.normals(uint64_t(param.model_offset + begin), count, values + begin);
          for (int64_t i = begin; i < begin + count; ++i) values[i] *= std;
        }
        if (param.role == ParamRole::Embedding && dims.pad_token_id >= 0) {
          std::fill(values + dims.pad_token_id * dims.hidden, values + (dims.pad_token_id + 1) * dims.hidden,
                    0.0f);
        }
        break;
      }
      case ParamRole::Norm:
      case ParamRole::ResidualScale:
      case ParamRole::InputScale:
      case ParamRole::RouterStatesScale:
        fill(1.0f);
        break;
      case ParamRole::BalancingBias:
        fill(0.0f);
        values[n - 1] = -1.0f;
        break;
      case ParamRole::LmHeadBias:
      case ParamRole::InputBias:
      case ParamRole::ResidualBias:
      case ParamRole::AttentionBias:
      case ParamRole::ConvBias:
      case ParamRole::KeyTemperature:
      case ParamRole::RouterBias:
        fill(0.0f);
        break;
    }
  }
}

}  // namespace zaya
