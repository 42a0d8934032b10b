#pragma once
// The weights of a model directory as transformers lays them out: one `model.safetensors`, or shards
// `model-0000i-of-0000N.safetensors` listed by `model.safetensors.index.json` ({"metadata": {...},
// "weight_map": {tensor: shard file}}).

#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace zaya {

class WeightSet {
 public:
  // Opens `dir`/model.safetensors, or the shards its index names. Throws Error naming the file and tensor.
  explicit WeightSet(const std::string& dir);

  struct Found {
    const SafetensorsFile* file;
    const SafetensorsEntry* entry;
  };
  // nullptr file when the name is absent.
  Found find(std::string_view name) const;
  std::vector<std::string> names() const;

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
};

// Writes `tensors` into `dir` as one model.safetensors when they fit in max_shard_bytes, else as shards
// plus the index, each file atomically. Returns the names of the files written. Nothing else in `dir` is
// touched: a directory holding weights of another layout is the caller's to refuse (OutputDirectory).
std::vector<std::string> write_weight_set(const std::string& dir,
                                          const std::vector<std::pair<std::string, TensorView>>& tensors,
                                          size_t max_shard_bytes,
                                          const std::map<std::string, std::string>& metadata);

// The names write_weight_set gives the files of tensors of these sizes (in bytes, in order):
// model.safetensors, or the shards and then the index.
std::vector<std::string> weight_file_names(const std::vector<size_t>& tensor_bytes, size_t max_shard_bytes);
// Whether a file of a model directory holds weights or says where they are (*.safetensors, the index): one
// that a loader reads.
bool is_weight_file(const std::string& name);

// The same sharded layout written by several writers at once (the ranks of a run): each writes its shard
// (index of count) and one of them the index, whose weight_map gives each tensor name its shard's index.
// Return the file name written.
std::string write_weight_shard(const std::string& dir, size_t index, size_t count,
                               const std::vector<std::pair<std::string, TensorView>>& tensors,
                               const std::map<std::string, std::string>& metadata);
std::string write_weight_index(const std::string& dir,
                               const std::vector<std::pair<std::string, size_t>>& weight_map, size_t count,
                               size_t total_bytes);

}  // namespace zaya
