// The op check's calls of the embedding family (op_table.h).

#include <algorithm>

#include "backend/op_check/call.h"
#include "core/error.h"

namespace zaya::op_check {
namespace {

// The token ids [T]: random, every 7th the padding id (where the model has one), whose table row the
// backward skips.
std::vector<int32_t> token_ids(Call& c, const Sizes& s) {
  const std::vector<float> draws = c.random(s.T);
  std::vector<int32_t> ids(static_cast<size_t>(s.T));
  for (size_t t = 0; t < ids.size(); ++t) {
    const int32_t drawn = std::min(int32_t(s.V) - 1, int32_t(0.5f * (draws[t] + 1.0f) * float(s.V)));
    ids[t] = t % 7 == 0 && s.pad >= 0 ? s.pad : drawn;
  }
  return ids;
}

}  // namespace

void embedding_calls(const Sizes& s, std::vector<CallSpec>& calls) {
  add(calls, "embedding_forward", cat(dims({s.T}), " ids of ", dims({s.V, s.H})), [s](Call& c) {
    const auto ids = c.input("ids", token_ids(c, s));  // [T]
    const auto table = c.uniform("table", s.V * s.H);  // [V, H]
    const auto bias = c.uniform("bias", s.H);          // [H]
    const auto scale = c.uniform("scale", s.H);        // [H]
    const auto out = c.output("out", s.T * s.H);       // [T, H]
    c.run([=](Ops& ops, const Placed& a) {
      ops.embedding_forward(a(ids), s.T, a(table), s.H, a(bias), a(scale), a(out));
    });
  });
  add(calls, "embedding_backward", cat(dims({s.T}), " ids into ", dims({s.V, s.H}), ", padding skipped"),
      [s](Call& c) {
        const auto ids = c.input("ids", token_ids(c, s));    // [T]
        const auto table = c.uniform("table", s.V * s.H);    // [V, H]
        const auto bias = c.uniform("bias", s.H);            // [H]
        const auto scale = c.uniform("scale", s.H);          // [H]
        const auto dout = c.uniform("dout", s.T * s.H);      // [T, H]
        const auto dtable = c.updated("dtable", s.V * s.H);  // [V, H], accumulated
        const auto dbias = c.updated("dbias", s.H);          // [H], accumulated
        const auto dscale = c.updated("dscale", s.H);        // [H], accumulated
        c.run([=](Ops& ops, const Placed& a) {
          ops.embedding_backward(a(ids), s.T, a(table), s.H, a(bias), a(scale), a(dout), s.pad, a(dtable),
                                 a(dbias), a(dscale));
        });
      });
}

}  // namespace zaya::op_check
