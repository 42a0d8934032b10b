// The op check's calls of the norms family (op_table.h).

#include "backend/op_check/call.h"
#include "core/error.h"

namespace zaya::op_check {

void norms_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  add(calls, "rmsnorm_forward", cat(dims({s.T, s.H}), bf16_output(s)), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.H, 3.0f);            // [T, H]
    const auto weight = c.uniform("weight", s.H);              // [H]
    const auto y = c.activation("y", s.T * s.H, s.precision);  // [T, H]
    const auto rstd = c.output("rstd", s.T);                   // [T]
    c.run([=](Ops& ops, const Placed& a) {
      ops.rmsnorm_forward(a(x), a(weight), s.T, s.H, s.eps, a(y), a(rstd));
    });
  });
  add(calls, "rmsnorm_backward", cat(dims({s.T, s.H}), ", dx accumulated"), [s](Call& c) {
    const auto x = c.uniform("x", s.T * s.H, 3.0f);                  // [T, H]
    const auto weight = c.uniform("weight", s.H);                    // [H]
    const auto rstd = c.saved("rstd", s.T);                          // [T]
    const auto y = c.scratch("y", [s](Ops&) { return s.T * s.H; });  // [T, H], unused
    const auto dy = c.uniform("dy", s.T * s.H);                      // [T, H]
    const auto dx = c.updated("dx", s.T * s.H);                      // [T, H], accumulated
    const auto dweight = c.updated("dweight", s.H);                  // [H], accumulated
    c.prepare([=](Ops& ops, const Placed& a) {
      ops.rmsnorm_forward(a(x), a(weight), s.T, s.H, s.eps, a(y), a(rstd));
    });
    c.run([=](Ops& ops, const Placed& a) {
      ops.rmsnorm_backward(a(x), a(weight), a(rstd), a(dy), s.T, s.H, a(dx), true, a(dweight));
    });
  });
  add(calls, "residual_scale_forward", dims({s.T, s.H}), [s](Call& c) {
    const auto h = c.uniform("h", s.T * s.H), r = c.uniform("r", s.T * s.H);  // [T, H]
    const auto h_bias = c.uniform("h_bias", s.H), h_scale = c.uniform("h_scale", s.H),
               r_bias = c.uniform("r_bias", s.H), r_scale = c.uniform("r_scale", s.H);  // [H]
    const auto out = c.output("out", s.T * s.H);                                        // [T, H]
    c.run([=](Ops& ops, const Placed& a) {
      ops.residual_scale_forward(a(h), a(r), a(h_bias), a(h_scale), a(r_bias), a(r_scale), s.T, s.H, a(out));
    });
  });
  add(calls, "residual_scale_backward", dims({s.T, s.H}), [s](Call& c) {
    const auto h = c.uniform("h", s.T * s.H), r = c.uniform("r", s.T * s.H);  // [T, H]
    const auto h_bias = c.uniform("h_bias", s.H), h_scale = c.uniform("h_scale", s.H),
               r_bias = c.uniform("r_bias", s.H), r_scale = c.uniform("r_scale", s.H);  // [H]
    const auto dout = c.uniform("dout", s.T * s.H);                                     // [T, H]
    const auto dh = c.output("dh", s.T * s.H), dr = c.output("dr", s.T * s.H);          // [T, H]
    const auto dh_bias = c.updated("dh_bias", s.H), dh_scale = c.updated("dh_scale", s.H),
               dr_bias = c.updated("dr_bias", s.H),
               dr_scale = c.updated("dr_scale", s.H);  // [H], accumulated
    c.run([=](Ops& ops, const Placed& a) {
      ops.residual_scale_backward(a(h), a(r), a(h_bias), a(h_scale), a(r_bias), a(r_scale), a(dout), s.T, s.H,
                                  a(dh), a(dr), a(dh_bias), a(dh_scale), a(dr_bias), a(dr_scale));
    });
  });
}

}  // namespace zaya::op_check
