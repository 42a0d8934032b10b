// The op check's calls of the attention family (op_table.h).

#include <cmath>

#include "backend/op_check/call.h"
#include "core/error.h"

namespace zaya::op_check {

// Attention of a full causal layer and, where the model has one, of a sliding-window layer, on a padded
// batch (rows that see no key included).
void attention_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  const float scale = 1.0f / std::sqrt(float(s.D));
  std::vector<int64_t> windows = {0};
  if (s.window > 0) windows.push_back(s.window);
  const auto layer = [](int64_t window) { return window > 0 ? cat("window ", window, ", ") : "causal, "; };
  const std::string sizes =
      cat("q ", dims({s.B, s.S, s.heads, s.D}), ", kv ", dims({s.B, s.S, s.kv_heads, s.D}),
          s.precision == Precision::BF16 ? ", bf16" : "");
  for (const int64_t window : windows) {
    const AttentionShape shape = s.attention(window);
    add(calls, "attention_forward", layer(window) + sizes, [s, shape, scale](Call& c) {
      // q spread so that the scores span a few units: a softmax far from uniform.
      const auto q = c.uniform("q", s.T * s.QD, 2.0f);                // [B, S, heads, D]
      const auto k = c.uniform("k", s.T * s.KD);                      // [B, S, KV, D]
      const auto v = c.uniform("v", s.T * s.KD);                      // [B, S, KV, D]
      const auto mask = c.input("key_mask", padding_mask(s.B, s.S));  // [B, S]
      const auto o = c.output("o", s.T * s.QD);                       // [B, S, heads, D]
      const auto lse = c.output("lse", s.T * s.heads);                // [B, heads, S]
      c.run([=](Ops& ops, const Placed& a) {
        ops.attention_forward(s.precision, a(q), a(k), a(v), a(mask), shape, scale, a(o), a(lse));
      });
    });
  }
  for (const int64_t window : windows) {
    const AttentionShape shape = s.attention(window);
    add(calls, "attention_backward", layer(window) + sizes, [s, shape, scale](Call& c) {
      const auto q = c.uniform("q", s.T * s.QD, 2.0f);                // [B, S, heads, D]
      const auto k = c.uniform("k", s.T * s.KD);                      // [B, S, KV, D]
      const auto v = c.uniform("v", s.T * s.KD);                      // [B, S, KV, D]
      const auto mask = c.input("key_mask", padding_mask(s.B, s.S));  // [B, S]
      const auto o = c.saved("o", s.T * s.QD);                        // [B, S, heads, D]
      const auto lse = c.saved("lse", s.T * s.heads);                 // [B, heads, S]
      const auto dout = c.uniform("dout", s.T * s.QD);                // [B, S, heads, D]
      const auto dq = c.output("dq", s.T * s.QD);                     // [B, S, heads, D]
      const auto dk = c.output("dk", s.T * s.KD);                     // [B, S, KV, D]
      const auto dv = c.output("dv", s.T * s.KD);                     // [B, S, KV, D]
      c.prepare([=](Ops& ops, const Placed& a) {
        ops.attention_forward(s.precision, a(q), a(k), a(v), a(mask), shape, scale, a(o), a(lse));
      });
      c.run([=](Ops& ops, const Placed& a) {
        ops.attention_backward(s.precision, a(q), a(k), a(v), a(mask), a(o), a(lse), a(dout), shape, scale,
                               a(dq), a(dk), a(dv));
      });
    });
  }
  // One new token of each of B sequences against its own cache, of S positions or fewer (the lengths
  // differ); decode is f32 whatever the precision.
  for (const int64_t window : windows) {
    const AttentionShape shape{s.B, 1, s.heads, s.kv_heads, s.D, window};
    add(calls, "attention_decode",
        cat(layer(window), "q ", dims({s.B, s.heads, s.D}), ", caches ", dims({s.B, s.S, s.kv_heads, s.D})),
        [s, shape, scale](Call& c) {
          const auto q = c.uniform("q", s.B * s.QD, 2.0f);      // [B, heads, D]
          const auto keys = c.uniform("keys", s.T * s.KD);      // [B, S, KV, D]
          const auto values = c.uniform("values", s.T * s.KD);  // [B, S, KV, D]
          const auto out = c.output("out", s.B * s.QD);         // [B, heads, D]
          c.run([=](Ops& ops, const Placed& a) {
            std::vector<const float*> key_caches, value_caches;  // [B]
            std::vector<int64_t> lengths;                        // [B]
            for (int64_t b = 0; b < s.B; ++b) {
              key_caches.push_back(a(keys) + b * s.S * s.KD);
              value_caches.push_back(a(values) + b * s.S * s.KD);
              lengths.push_back(std::max<int64_t>(1, s.S - 3 * b));
            }
            ops.attention_decode(a(q), key_caches.data(), value_caches.data(), lengths.data(), shape, scale,
                                 a(out));
          });
        });
  }
}

}  // namespace zaya::op_check
