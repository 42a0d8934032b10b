#pragma once
// Data parallel: the gradients of one region of the layout (the dense parameters over all ranks, or the
// expert weights over the ranks that hold the same experts) summed over a group of ranks onto the owner of
// each range (ZeRO-1, optim/optimizer_shards.h), in buckets that start while the backward pass is still at
// work on earlier layers. Backward finishes the decoder layers last to first; a bucket is a run of
// consecutive layers of the region (at least bucket_floats, except the lowest) and starts as soon as its
// lowest layer is done. What lies outside the layers (embedding, final norm, input scale and bias, LM
// head) is final only at the end of the pass and goes last.

#include <cstdint>
#include <memory>
#include <vector>

#include "core/buffer.h"
#include "optim/optimizer_shards.h"

namespace zaya {

class DeviceCommunicator;
class Ops;
class ParameterTable;
class PendingCollective;

struct GradientBucket {
  int64_t begin = 0, end = 0;  // float offsets into the flat gradient
  int64_t ready_layer = -1;    // its gradients are final once this layer's backward is done; -1: the pass
};

// The buckets of the region [begin, end) of the layout, in the order they become final. bucket_floats = 0:
// one bucket of the whole region, at the end of the pass.
std::vector<GradientBucket> plan_gradient_buckets(const ParameterTable& table, int64_t begin, int64_t end,
                                                  int64_t bucket_floats);

class GradientReducer {
 public:
  // shards: the ranges of comm's ranks, which cover the region they were planned for. The gradients live
  // in ops' memory.
  GradientReducer(const ParameterTable& table, OptimizerShards shards, DeviceCommunicator& comm, Ops& ops,
                  int64_t bucket_floats);
  ~GradientReducer();

  // One reduction of the region of grads [total floats], which must stay untouched by anything but the
  // backward pass until finish(): start() first, layer_done(l) after each layer's backward, then finish().
  // Collective.
  void start(float* grads);
  void layer_done(int64_t layer);  // starts the buckets this layer completes; moves those in flight on
  void finish();                   // the rest; then grads' owned range holds the sums over ranks

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // Time this rank spent inside the calls above (starting, moving on and waiting) in the last reduction.
  double seconds() const { return seconds_; }

 private:
  void start_ready(int64_t layer);

  std::vector<GradientBucket> buckets_;
  OptimizerShards shards_;
  DeviceCommunicator& comm_;
  Ops& ops_;
  AlignedBuffer
      owned_;  // [this rank's range] where the sums land (in ops' memory), copied into grads at the end
  float* grads_ = nullptr;
  size_t started_ = 0;  // buckets_[0, started_) are in flight or done
  std::vector<std::unique_ptr<PendingCollective>> pending_;
  double seconds_ = 0;
};

}  // namespace zaya
