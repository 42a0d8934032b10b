#pragma once
// What incremental decoding carries from one token to the next, per layer: the last (k0 - 1) + (k1 - 1)
// rows of the convolution's input (q0 | k0), the previous token's delayed value projection, and the keys
// and values seen so far. The router has no state across time. The buffers live in the backend's memory
// (the model's ops read and write them), zeroed when made.

#include <cstdint>
#include <vector>

#include "core/buffer.h"
#include "model/model_dims.h"

namespace zaya {

struct DecodeCache {
  struct Layer {
    AlignedBuffer conv_tail;  // [tail_rows, C] floats, the newest last; zeros before the first tokens
    AlignedBuffer delayed;    // [kv_dim / 2] v_proj_delayed of the previous token (its bias at the start)
    AlignedBuffer keys;       // [capacity, kv_heads * D], normalised and rotated
    AlignedBuffer values;     // [capacity, kv_heads * D]
  };
  int64_t length = 0;    // tokens fed so far
  int64_t capacity = 0;  // the most tokens the cache holds
  std::vector<Layer> layers;
};

// An empty cache for up to `capacity` tokens, in `memory` (the model's backend's).
DecodeCache make_decode_cache(const ModelDims& dims, int64_t capacity,
                              MemoryResource& memory = host_memory());

// The bytes a cache takes per token of its capacity (its keys and values).
int64_t decode_cache_bytes_per_token(const ModelDims& dims);

}  // namespace zaya
