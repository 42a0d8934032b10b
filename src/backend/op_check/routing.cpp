// The op check's calls of the routing family (op_table.h).

#include <algorithm>

#include "backend/op_check/call.h"
#include "core/error.h"

namespace zaya::op_check {
namespace {

// Each token's route [T] in [0, experts]: about one in six the skip route (experts).
std::vector<int32_t> random_choices(Call& call, int64_t tokens, int64_t experts) {
  const std::vector<float> draws = call.random(tokens);
  std::vector<int32_t> choice(static_cast<size_t>(tokens));
  for (size_t t = 0; t < choice.size(); ++t) {
    const float u = 0.5f * (draws[t] + 1.0f);  // in [0, 1)
    choice[t] = u < 1.0f / 6 ? int32_t(experts) : std::min(int32_t(experts) - 1, int32_t(u * float(experts)));
  }
  return choice;
}

// The routed part of the grouping group_by_expert defines: each expert's tokens in increasing order, the
// skip-routed ones (which follow) left out; the input of the data movement ops whatever the backend's
// group_by_expert does.
std::vector<int32_t> grouped_order(const std::vector<int32_t>& choice, int64_t experts) {
  std::vector<int32_t> order;
  for (int32_t e = 0; e < int32_t(experts); ++e) {
    for (size_t t = 0; t < choice.size(); ++t) {
      if (choice[t] == e) order.push_back(int32_t(t));
    }
  }
  return order;
}

// The router's gate of each token: a probability, 0 for the skip route.
std::vector<float> gates(Call& call, const std::vector<int32_t>& choice, int64_t experts) {
  std::vector<float> gate = call.random(int64_t(choice.size()));
  for (size_t t = 0; t < gate.size(); ++t) gate[t] = choice[t] == experts ? 0.0f : 0.5f * (gate[t] + 1.0f);
  return gate;
}

// The router's logits [T, routes] (spread, so that the choices are clear) and balancing biases [routes].
struct RouterInputs {
  Array<float> logits, biases;
};

RouterInputs router_inputs(Call& c, const Sizes& s) {
  return {c.uniform("logits", s.T * s.routes, 3.0f), c.uniform("biases", s.routes, 0.05f)};
}

// The router: its choice, its statistics and auxiliary losses, each with its backward.
void router_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  const std::string logits = dims({s.T, s.routes});
  add(calls, "route_top1", logits, [s](Call& c) {
    const RouterInputs in = router_inputs(c, s);
    const auto probs = c.output("probs", s.T * s.routes);  // [T, routes]
    const auto choice = c.output<int32_t>("choice", s.T);  // [T]
    const auto gate = c.output("gate", s.T);               // [T]
    const auto lse = c.output("lse", s.T);                 // [T]
    c.run([=](Ops& ops, const Placed& a) {
      ops.route_top1(a(in.logits), a(in.biases), s.T, s.routes, a(probs), a(choice), a(gate), a(lse));
    });
  });
  add(calls, "route_top1_backward", logits, [s](Call& c) {
    const RouterInputs in = router_inputs(c, s);
    const auto probs = c.saved("probs", s.T * s.routes);             // [T, routes]
    const auto choice = c.saved<int32_t>("choice", s.T);             // [T]
    const auto gate = c.scratch("gate", [s](Ops&) { return s.T; });  // [T], unused
    const auto lse = c.scratch("lse", [s](Ops&) { return s.T; });    // [T], unused
    const auto dgate = c.uniform("dgate", s.T);                      // [T]
    const auto dlogits = c.output("dlogits", s.T * s.routes);        // [T, routes]
    c.prepare([=](Ops& ops, const Placed& a) {
      ops.route_top1(a(in.logits), a(in.biases), s.T, s.routes, a(probs), a(choice), a(gate), a(lse));
    });
    c.run([=](Ops& ops, const Placed& a) {
      ops.route_top1_backward(a(probs), a(choice), a(dgate), s.T, s.routes, a(dlogits));
    });
  });
  add(calls, "router_statistics", cat(logits, ", accumulated"), [s](Call& c) {
    const RouterInputs in = router_inputs(c, s);
    const auto probs = c.saved("probs", s.T * s.routes);             // [T, routes]
    const auto choice = c.saved<int32_t>("choice", s.T);             // [T]
    const auto lse = c.saved("lse", s.T);                            // [T]
    const auto gate = c.scratch("gate", [s](Ops&) { return s.T; });  // [T], unused
    // Accumulated onto earlier micro-batches' sums.
    const auto counts = c.updated("counts", std::vector<int64_t>(size_t(s.routes), 3));  // [routes]
    const auto prob_sums = c.updated("prob_sums", std::vector<double>(size_t(s.routes), 0.5));
    const auto entropy = c.updated("entropy_sum", std::vector<double>{1.25});
    const auto lse_square = c.updated("lse_square_sum", std::vector<double>{2.5});
    c.prepare([=](Ops& ops, const Placed& a) {
      ops.route_top1(a(in.logits), a(in.biases), s.T, s.routes, a(probs), a(choice), a(gate), a(lse));
    });
    c.run([=](Ops& ops, const Placed& a) {
      ops.router_statistics(a(probs), a(lse), a(choice), s.T, s.routes, a(counts), a(prob_sums), a(entropy),
                            a(lse_square));
    });
  });
  add(calls, "router_aux_backward", cat(logits, ", accumulated"), [s](Call& c) {
    const RouterInputs in = router_inputs(c, s);
    const auto probs = c.saved("probs", s.T * s.routes);             // [T, routes]
    const auto lse = c.saved("lse", s.T);                            // [T]
    const auto choice = c.saved<int32_t>("choice", s.T);             // [T], unused
    const auto gate = c.scratch("gate", [s](Ops&) { return s.T; });  // [T], unused
    const auto route_coef = c.uniform("route_coef", s.routes);       // [routes]
    const auto dlogits = c.updated("dlogits", s.T * s.routes);       // [T, routes], accumulated
    c.prepare([=](Ops& ops, const Placed& a) {
      ops.route_top1(a(in.logits), a(in.biases), s.T, s.routes, a(probs), a(choice), a(gate), a(lse));
    });
    c.run([=](Ops& ops, const Placed& a) {
      ops.router_aux_backward(a(probs), a(lse), s.T, s.routes, a(route_coef), 0.01f, a(dlogits));
    });
  });
}

// The experts' side: tokens grouped by expert, their rows moved, and the experts' SwiGLU.
void expert_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  add(calls, "group_by_expert", cat(dims({s.T}), " choices of ", s.routes, " routes"), [s](Call& c) {
    const auto choice = c.input("choice", random_choices(c, s.T, s.E));  // [T]
    const auto order = c.output<int32_t>("order", s.T);                  // [T]
    const auto offsets = c.output<int64_t>("offsets", s.E + 1);          // [E + 1]
    c.run([=](Ops& ops, const Placed& a) { ops.group_by_expert(a(choice), s.T, s.E, a(order), a(offsets)); });
  });
  // The experts' data movement, over the routed tokens (the skip-routed left out).
  add(calls, "gather_rows", cat("routed rows of ", dims({s.T, s.H}), ", gate-scaled", bf16_output(s)),
      [s](Call& c) {
        const std::vector<int32_t> choice = random_choices(c, s.T, s.E);
        const auto order_values = grouped_order(choice, s.E);
        const int64_t routed = int64_t(order_values.size());
        const auto src = c.uniform("src", s.T * s.H);                     // [T, H]
        const auto order = c.input("order", order_values);                // [routed]
        const auto gate = c.input("gate", gates(c, choice, s.E));         // [T]
        const auto dst = c.activation("dst", routed * s.H, s.precision);  // [routed, H]
        c.run([=](Ops& ops, const Placed& a) {
          ops.gather_rows(a(src), a(order), a(gate), routed, s.H, a(dst));
        });
      });
  add(calls, "scatter_rows", cat("routed rows into ", dims({s.T, s.H}), ", gate-scaled"), [s](Call& c) {
    const std::vector<int32_t> choice = random_choices(c, s.T, s.E);
    const auto order_values = grouped_order(choice, s.E);
    const int64_t routed = int64_t(order_values.size());
    const auto src = c.uniform("src", routed * s.H);           // [routed, H]
    const auto order = c.input("order", order_values);         // [routed]
    const auto gate = c.input("gate", gates(c, choice, s.E));  // [T]
    // Overwritten where routed; the skip-routed rows keep their values.
    const auto dst = c.output("dst", s.T * s.H);  // [T, H]
    c.run([=](Ops& ops, const Placed& a) {
      ops.scatter_rows(a(src), a(order), a(gate), routed, s.H, false, a(dst));
    });
  });
  add(calls, "gather_dot", cat("routed rows of ", dims({s.T, s.H})), [s](Call& c) {
    const std::vector<int32_t> choice = random_choices(c, s.T, s.E);
    const auto order_values = grouped_order(choice, s.E);
    const int64_t routed = int64_t(order_values.size());
    const auto d_moe = c.uniform("a", s.T * s.H);       // [T, H]
    const auto order = c.input("order", order_values);  // [routed]
    const auto y = c.uniform("b", routed * s.H);        // [routed, H]
    const auto out = c.output("out", routed);           // [routed]
    c.run([=](Ops& ops, const Placed& a) { ops.gather_dot(a(d_moe), a(order), a(y), routed, s.H, a(out)); });
  });
  add(calls, "swiglu_forward", cat(dims({s.T, 2 * s.I}), bf16_output(s)), [s](Call& c) {
    const auto gate_up = c.uniform("gate_up", s.T * 2 * s.I, 4.0f);  // [T, 2I]
    const auto out = c.activation("out", s.T * s.I, s.precision);    // [T, I]
    c.run([=](Ops& ops, const Placed& a) { ops.swiglu_forward(a(gate_up), s.T, s.I, a(out)); });
  });
  add(calls, "swiglu_backward", cat(dims({s.T, 2 * s.I}), bf16_output(s)), [s](Call& c) {
    const auto gate_up = c.uniform("gate_up", s.T * 2 * s.I, 4.0f);              // [T, 2I]
    const auto dout = c.uniform("dout", s.T * s.I);                              // [T, I]
    const auto dgate_up = c.activation("dgate_up", s.T * 2 * s.I, s.precision);  // [T, 2I]
    c.run(
        [=](Ops& ops, const Placed& a) { ops.swiglu_backward(a(gate_up), a(dout), s.T, s.I, a(dgate_up)); });
  });
}

}  // namespace

void routing_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  router_calls(s, calls);
  expert_calls(s, calls);
}

}  // namespace zaya::op_check
