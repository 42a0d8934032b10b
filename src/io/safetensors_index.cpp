#include "io/safetensors_index.h"

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/json_input.h"

namespace zaya {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string shard_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

// Each tensor's shard: greedy packing in the given order; a tensor larger than the limit gets a shard of its
// own.
std::vector<size_t> assign_shards(const std::vector<size_t>& tensor_bytes, size_t max_shard_bytes) {
  std::vector<size_t> shard_of;
  size_t shard = 0, shard_bytes = 0;
  for (const size_t bytes : tensor_bytes) {
    if (shard_bytes > 0 && shard_bytes + bytes > max_shard_bytes) {
      ++shard;
      shard_bytes = 0;
    }
    shard_of.push_back(shard);
    shard_bytes += bytes;
  }
  return shard_of;
}

}  // namespace

std::vector<std::string> weight_file_names(const std::vector<size_t>& tensor_bytes, size_t max_shard_bytes) {
  const std::vector<size_t> shard_of = assign_shards(tensor_bytes, max_shard_bytes);
  const size_t shards = shard_of.empty() ? 1 : shard_of.back() + 1;
  if (shards == 1) return {kSingleFile};
  std::vector<std::string> names;
  for (size_t i = 0; i < shards; ++i) names.push_back(shard_name(i, shards));
  names.push_back(kIndexFile);
  return names;
}

bool is_weight_file(const std::string& name) {
  return name == kIndexFile || name.ends_with(".safetensors");
}

WeightSet::WeightSet(const std::string& dir) {
  const fs::path single = fs::path(dir) / kSingleFile, index_path = fs::path(dir) / kIndexFile;
  if (fs::exists(single)) {
    files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
    return;
  }
  if (!fs::exists(index_path)) {
    throw Error(cat("no ", kSingleFile, " or ", kIndexFile, " in the model directory")).file(dir);
  }
  const json index = parse_json(read_text_file(index_path.string()), index_path.string());
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw Error("missing the 'weight_map' object").file(index_path.string()).field("weight_map");
  }
  std::map<std::string, size_t> opened;  // shard file -> position in files_
  for (const auto& [tensor, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      throw Error("shard name is not a string").file(index_path.string()).tensor(tensor);
    const std::string shard_file = shard.get<std::string>();
    if (shard_file.find('/') != std::string::npos || shard_file == "..") {
      throw Error("shard name must be a file in the model directory")
          .file(index_path.string())
          .tensor(tensor);
    }
    auto [it, inserted] = opened.emplace(shard_file, files_.size());
    if (inserted) files_.push_back(std::make_unique<SafetensorsFile>((fs::path(dir) / shard_file).string()));
    if (!files_[it->second]->find(tensor)) {
      throw Error("the index places this tensor in a shard that lacks it")
          .file(files_[it->second]->path())
          .tensor(tensor);
    }
  }
}

WeightSet::Found WeightSet::find(std::string_view name) const {
  for (const auto& file : files_) {
    if (const SafetensorsEntry* entry = file->find(name)) return {file.get(), entry};
  }
  return {nullptr, nullptr};
}

std::vector<std::string> WeightSet::names() const {
  std::set<std::string> unique;
  for (const auto& file : files_) {
    for (const SafetensorsEntry& entry : file->entries()) {
      if (!unique.insert(entry.name).second) {
        throw Error("tensor appears in more than one shard").file(file->path()).tensor(entry.name);
      }
    }
  }
  return {unique.begin(), unique.end()};
}

std::vector<std::string> write_weight_set(const std::string& dir,
                                          const std::vector<std::pair<std::string, TensorView>>& tensors,
                                          size_t max_shard_bytes,
                                          const std::map<std::string, std::string>& metadata) {
  fs::create_directories(dir);
  std::vector<size_t> tensor_bytes;
  for (const auto& [name, view] : tensors) tensor_bytes.push_back(view.nbytes());
  const std::vector<size_t> shard_of = assign_shards(tensor_bytes, max_shard_bytes);
  std::vector<std::vector<std::pair<std::string, TensorView>>> shards(shard_of.empty() ? 1
                                                                                       : shard_of.back() + 1);
  std::vector<std::pair<std::string, size_t>> weight_map;
  size_t total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    shards[shard_of[i]].push_back(tensors[i]);
    weight_map.emplace_back(tensors[i].first, shard_of[i]);
    total += tensor_bytes[i];
  }
  std::vector<std::string> written;
  if (shards.size() == 1) {
    SafetensorsWriter single;
    for (const auto& [key, value] : metadata) single.set_metadata(key, value);
    for (const auto& [name, view] : shards[0]) single.add(name, view);
    single.write((fs::path(dir) / kSingleFile).string());
    written.push_back(kSingleFile);
  } else {
    for (size_t i = 0; i < shards.size(); ++i)
      written.push_back(write_weight_shard(dir, i, shards.size(), shards[i], metadata));
    written.push_back(write_weight_index(dir, weight_map, shards.size(), total));
  }
  return written;
}

std::string write_weight_shard(const std::string& dir, size_t index, size_t count,
                               const std::vector<std::pair<std::string, TensorView>>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  SafetensorsWriter shard;
  for (const auto& [key, value] : metadata) shard.set_metadata(key, value);
  for (const auto& [name, view] : tensors) shard.add(name, view);
  const std::string name = shard_name(index, count);
  shard.write((fs::path(dir) / name).string());
  return name;
}

std::string write_weight_index(const std::string& dir,
                               const std::vector<std::pair<std::string, size_t>>& weight_map, size_t count,
                               size_t total_bytes) {
  json map = json::object();
  for (const auto& [tensor, shard] : weight_map) map[tensor] = shard_name(shard, count);
  const json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", map}};
  write_file_atomic((fs::path(dir) / kIndexFile).string(), index.dump(2) + "\n");
  return kIndexFile;
}

}  // namespace zaya
