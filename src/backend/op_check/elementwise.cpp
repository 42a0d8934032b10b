// The op check's calls of the elementwise family (op_table.h).

#include "backend/op_check/call.h"
#include "core/error.h"

namespace zaya::op_check {

void elementwise_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  add(calls, "gelu_forward", cat("router MLP ", dims({s.T, s.R})), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.R, 4.0f);  // [T, R]
    const auto y = c.output("y", s.T * s.R);         // [T, R]
    c.run([=](Ops& ops, const Placed& a) { ops.gelu_forward(a(x), s.T * s.R, a(y)); });
  });
  add(calls, "gelu_backward", cat("router MLP ", dims({s.T, s.R})), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.R, 4.0f);  // [T, R]
    const auto dy = c.uniform("dy", s.T * s.R);      // [T, R]
    const auto dx = c.output("dx", s.T * s.R);       // [T, R]
    c.run([=](Ops& ops, const Placed& a) { ops.gelu_backward(a(x), a(dy), s.T * s.R, a(dx)); });
  });
  add(calls, "fill", dims({s.T, s.H}), [s](Call& c) {
    const auto x = c.output("x", s.T * s.H);  // [T, H]
    c.run([=](Ops& ops, const Placed& a) { ops.fill(a(x), s.T * s.H, -2.5f); });
  });
  add(calls, "mask_rows", cat(dims({s.T, s.H}), ", padded rows", bf16_output(s)), [s](Call& c) {
    const auto x = c.updated_activation("x", s.T * s.H, s.precision);  // [T, H], in place
    const auto mask = c.input("mask", padding_mask(s.B, s.S));         // [T]
    c.run([=](Ops& ops, const Placed& a) { ops.mask_rows(a(x), s.T, s.H, a(mask)); });
  });
  // The convolution's q columns added onto the q-k mean's q (the model's q before its norm).
  add(calls, "copy_rows", cat(dims({s.T, s.QD}), " of ", dims({s.T, s.C}), " added"), [s](Call& c) {
    const auto src = c.uniform("src", s.T * s.C);   // [T, C]
    const auto dst = c.updated("dst", s.T * s.QD);  // [T, QD], accumulated
    c.run([=](Ops& ops, const Placed& a) { ops.copy_rows(a(src), s.C, s.T, s.QD, a(dst), s.QD, true); });
  });
  // The values' delayed half: the second half of each row of v [T, KD].
  add(calls, "delay_forward", cat(dims({s.B, s.S, s.half_v}), " into ", dims({s.T, s.KD})), [s](Call& c) {
    const auto src = c.uniform("src", s.T * s.half_v);  // [B, S, KD / 2]
    const auto first = c.uniform("first", s.half_v);    // [KD / 2]
    const auto v = c.output("v", s.T * s.KD);           // [T, KD]
    c.run([=](Ops& ops, const Placed& a) {
      ops.delay_forward(a(src), a(first), s.B, s.S, s.half_v, a(v) + s.half_v, s.KD);
    });
  });
  add(calls, "delay_backward", cat(dims({s.T, s.KD}), " into ", dims({s.B, s.S, s.half_v})), [s](Call& c) {
    const auto dv = c.uniform("dv", s.T * s.KD);         // [T, KD]
    const auto dsrc = c.output("dsrc", s.T * s.half_v);  // [B, S, KD / 2]
    const auto dfirst = c.updated("dfirst", s.half_v);   // [KD / 2], accumulated
    c.run([=](Ops& ops, const Placed& a) {
      ops.delay_backward(a(dv) + s.half_v, s.KD, s.B, s.S, s.half_v, a(dsrc), a(dfirst));
    });
  });
  // The router's depth averaging: the previous layer's state times router_states_scale.
  add(calls, "add_scaled", cat("router state ", dims({s.T, s.R})), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.R);    // [T, R]
    const auto scale = c.uniform("scale", s.R);  // [R]
    const auto y = c.updated("y", s.T * s.R);    // [T, R], accumulated
    c.run([=](Ops& ops, const Placed& a) { ops.add_scaled(a(x), a(scale), s.T, s.R, a(y)); });
  });
  add(calls, "add_scaled_backward", cat("router state ", dims({s.T, s.R})), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.R);      // [T, R]
    const auto scale = c.uniform("scale", s.R);    // [R]
    const auto dy = c.uniform("dy", s.T * s.R);    // [T, R]
    const auto dx = c.output("dx", s.T * s.R);     // [T, R]
    const auto dscale = c.updated("dscale", s.R);  // [R], accumulated
    c.run([=](Ops& ops, const Placed& a) {
      ops.add_scaled_backward(a(x), a(scale), a(dy), s.T, s.R, a(dx), a(dscale));
    });
  });
}

}  // namespace zaya::op_check
