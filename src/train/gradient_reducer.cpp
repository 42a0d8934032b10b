#include "train/gradient_reducer.h"

#include <algorithm>
#include <chrono>

#include "backend/ops.h"
#include "dist/communicator.h"
#include "dist/device_communicator.h"
#include "model/parameters.h"

namespace zaya {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

std::vector<GradientBucket> plan_gradient_buckets(const ParameterTable& table, int64_t begin, int64_t end,
                                                  int64_t bucket_floats) {
  if (bucket_floats <= 0) return {{begin, end, -1}};
  // The region keeps each layer's parameters together, layers in order (transformers' state_dict order).
  std::vector<int64_t> layer_begin;  // [layers] where each layer's gradients start
  int64_t layers_end = end;          // where what follows the layers starts
  for (const ParamInfo& param : table.params()) {
    if (param.offset < begin || param.offset >= end) continue;
    if (param.layer >= 0 && size_t(param.layer) == layer_begin.size()) layer_begin.push_back(param.offset);
    if (param.layer < 0 && !layer_begin.empty() && layers_end == end) layers_end = param.offset;
  }
  std::vector<GradientBucket> buckets;
  int64_t bucket_end = layers_end;
  for (int64_t l = int64_t(layer_begin.size()) - 1; l >= 0; --l) {
    const int64_t bucket_begin = layer_begin[size_t(l)];
    if (bucket_end - bucket_begin >= bucket_floats || l == 0) {
      buckets.push_back({bucket_begin, bucket_end, l});
      bucket_end = bucket_begin;
    }
  }
  if (layers_end < end) buckets.push_back({layers_end, end, -1});
  const int64_t layers_begin = layer_begin.empty() ? end : layer_begin.front();
  if (layers_begin > begin) buckets.push_back({begin, layers_begin, -1});
  return buckets;
}

GradientReducer::GradientReducer(const ParameterTable& table, OptimizerShards shards,
                                 DeviceCommunicator& comm, Ops& ops, int64_t bucket_floats)
    : buckets_(plan_gradient_buckets(table, shards.bounds.front(), shards.bounds.back(), bucket_floats)),
      shards_(std::move(shards)),
      comm_(comm),
      ops_(ops),
      owned_(size_t(shards_.end(comm.rank()) - shards_.begin(comm.rank())) * sizeof(float), ops.memory()) {}

GradientReducer::~GradientReducer() = default;

void GradientReducer::start(float* grads) {
  grads_ = grads;
  started_ = 0;
  pending_.clear();
  seconds_ = 0;
}

void GradientReducer::layer_done(int64_t layer) {
  const auto start = Clock::now();
  start_ready(layer);
  for (auto& pending : pending_) pending->progress();
  seconds_ += since(start);
}

void GradientReducer::finish() {
  const auto start = Clock::now();
  start_ready(-1);
  for (auto& pending : pending_) pending->wait();
  pending_.clear();
  const int64_t owned = int64_t(owned_.size() / sizeof(float));
  if (owned > 0)
    ops_.copy_rows(owned_.as<float>(), owned, 1, owned, grads_ + shards_.begin(comm_.rank()), owned, false);
  seconds_ += since(start);
}

// Each rank r receives the part of the bucket inside its range [shards_.begin(r), shards_.end(r)); the
// ranges are consecutive in rank order, so the bucket is already laid out as the collective wants it.
void GradientReducer::start_ready(int64_t layer) {
  const int rank = comm_.rank();
  for (; started_ < buckets_.size() && buckets_[started_].ready_layer >= layer; ++started_) {
    const GradientBucket& bucket = buckets_[started_];
    std::vector<int64_t> counts;
    for (int r = 0; r < comm_.size(); ++r) {
      const int64_t from = std::max(bucket.begin, shards_.begin(r)),
                    to = std::min(bucket.end, shards_.end(r));
      counts.push_back(std::max<int64_t>(0, to - from));
    }
    float* recv = owned_.as<float>() + std::max<int64_t>(0, bucket.begin - shards_.begin(rank));
    if (counts[size_t(rank)] == 0) recv = owned_.as<float>();
    pending_.push_back(comm_.start_reduce_scatter_sum(grads_ + bucket.begin, recv, std::move(counts)));
  }
}

}  // namespace zaya
