// The op check's calls of the optimizer family (op_table.h).

#include <cmath>

#include "backend/op_check/call.h"
#include "core/error.h"

namespace zaya::op_check {

void optimizer_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  const int64_t n = s.optimizer_count();
  const std::string experts = cat("experts' ", dims({s.E, 2 * s.I, s.H}));
  add(calls, "sum_squares", experts, [n](Call& c) {
    const auto x = c.uniform("x", n, 2.0f);                        // [n]
    const auto sum = c.updated("sum", std::vector<double>{12.5});  // [1], accumulated
    c.run([=](Ops& ops, const Placed& a) { ops.sum_squares(a(x), n, a(sum)); });
  });
  add(calls, "adamw_step", cat(experts, ", step 3"), [n](Call& c) {
    std::vector<float> second = c.random(n, 0.1f);
    for (float& value : second) value *= value;  // v >= 0
    const auto param = c.updated("param", n);    // [n], in place
    const auto grad = c.uniform("grad", n);      // [n]
    const auto m = c.updated("m", n, 0.1f);      // [n], in place
    const auto v = c.updated("v", second);       // [n], in place
    Ops::AdamWStep step{};
    step.lr = 1e-2f;
    step.beta1 = 0.9f;
    step.beta2 = 0.95f;
    step.eps = 1e-8f;
    step.weight_decay = 0.1f;
    step.grad_scale = 0.5f;
    step.bias_correction1 = 1.0f - std::pow(step.beta1, 3.0f);
    step.bias_correction2 = 1.0f - std::pow(step.beta2, 3.0f);
    c.run([=](Ops& ops, const Placed& a) { ops.adamw_step(a(param), a(grad), a(m), a(v), n, step); });
  });
  add(calls, "momentum_step", cat(experts, ", nesterov"), [n](Call& c) {
    const auto buf = c.updated("buf", n);    // [n], in place
    const auto grad = c.uniform("grad", n);  // [n]
    const auto out = c.output("out", n);     // [n]
    c.run(
        [=](Ops& ops, const Placed& a) { ops.momentum_step(a(buf), a(grad), n, 0.95f, true, 0.5f, a(out)); });
  });
  add(calls, "newton_schulz", cat(experts, ", 5 steps", s.precision == Precision::BF16 ? ", bf16" : ""),
      [s, n](Call& c) {
        const auto x = c.updated("x", n);  // [E, 2I, H], in place
        c.run([=](Ops& ops, const Placed& a) {
          // Muon's quintic (optim/optimizer.h's defaults).
          const float coefficients[3] = {3.4445f, -4.7750f, 2.0315f};
          ops.newton_schulz(s.precision, a(x), s.E, 2 * s.I, s.H, 5, coefficients);
        });
      });
  add(calls, "decay_and_subtract", experts, [n](Call& c) {
    const auto param = c.updated("param", n);    // [n], in place
    const auto update = c.uniform("update", n);  // [n]
    c.run([=](Ops& ops, const Placed& a) { ops.decay_and_subtract(a(param), a(update), n, 1e-3f, 0.02f); });
  });
}

}  // namespace zaya::op_check
