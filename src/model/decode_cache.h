#pragma once
// What incremental decoding carries from one token to the next, per layer: the last (k0 - 1) + (k1 - 1)
// rows of the convolution's input (q0 | k0), the previous token's delayed value projection, and the keys
// and values seen so far. The router has no state across time.

#include <cstdint>
#include <vector>

#include "model/model_dims.h"

namespace zaya {

struct DecodeCache {
  struct Layer {
    std::vector<float> conv_tail;  // [tail_rows, C], oldest first; filled as tokens arrive
    std::vector<float> delayed;  // [kv_dim / 2] v_proj_delayed of the previous token (its bias at the start)
    std::vector<float> keys;     // [capacity, kv_heads * D], normalised and rotated
    std::vector<float> values;   // [capacity, kv_heads * D]
  };
  int64_t length = 0;    // tokens fed so far
  int64_t capacity = 0;  // the most tokens the cache holds
  std::vector<Layer> layers;
};

// An empty cache for up to `capacity` tokens.
DecodeCache make_decode_cache(const ModelDims& dims, int64_t capacity);

}  // namespace zaya
