// The op check's calls of the loss family (op_table.h).

#include <algorithm>

#include "backend/op_check/call.h"
#include "core/error.h"

namespace zaya::op_check {

// In bf16 the gradient is written as a bf16 step's head reads it: rounded, with no f32 copy.
void loss_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  const bool bf16 = s.precision == Precision::BF16;
  add(calls, "cross_entropy", cat(dims({s.L, s.V}), ", ignored rows", bf16 ? ", bf16 gradient" : ""),
      [s, bf16](Call& c) {
        // Labels in the vocabulary, every 8th row ignored (-100, as padding is).
        const std::vector<float> draws = c.random(s.L);
        std::vector<int32_t> label_values(static_cast<size_t>(s.L));
        for (size_t r = 0; r < label_values.size(); ++r) {
          label_values[r] =
              r % 8 == 1 ? -100 : std::min(int32_t(s.V) - 1, int32_t(0.5f * (draws[r] + 1.0f) * float(s.V)));
        }
        const auto logits = c.uniform("logits", s.L * s.V, 5.0f);           // [L, V]
        const auto labels = c.input("labels", label_values);                // [L]
        const auto loss = c.updated("loss_sum", std::vector<double>{1.5});  // [1], accumulated
        const float grad_scale = 1.0f / float(s.L);
        if (bf16) {
          const auto dlogits = c.output<BFloat16>("dlogits bf16", s.L * s.V);  // [L, V]
          c.run([=](Ops& ops, const Placed& a) {
            ops.cross_entropy(a(logits), a(labels), s.L, s.V, grad_scale, nullptr, a(dlogits), a(loss));
          });
        } else {
          const auto dlogits = c.output("dlogits", s.L * s.V);  // [L, V]
          c.run([=](Ops& ops, const Placed& a) {
            ops.cross_entropy(a(logits), a(labels), s.L, s.V, grad_scale, a(dlogits), nullptr, a(loss));
          });
        }
      });
}

}  // namespace zaya::op_check
