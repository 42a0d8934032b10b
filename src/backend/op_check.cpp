#include "backend/op_check.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "backend/op_check/call.h"
#include "backend/ops.h"
#include "core/error.h"

namespace zaya {

std::vector<OpCheckResult> check_ops(const OpCheckShape& shape, Ops& reference, Ops& device,
                                     const OpCheckOptions& options) {
  if (shape.batch <= 0 || shape.seq <= 0) {
    throw Error(cat("check_ops needs a batch and a sequence length, got ", shape.batch, " x ", shape.seq));
  }
  const op_check::Sizes sizes(shape, options.precision);
  // In the table's order (op_table.h). Each call is built, run and freed before the next, so memory holds one
  // call's arrays.
  std::vector<op_check::CallSpec> calls;
#define ZAYA_FAMILY(family) op_check::family##_calls(sizes, calls);
#define ZAYA_OP(name, params, args)
#include "backend/op_table.h"
  for (const std::string_view op : kOpNames) {
    const bool called =
        std::any_of(calls.begin(), calls.end(), [&](const op_check::CallSpec& c) { return c.op == op; });
    if (!called)
      throw Error(cat("check_ops has no call of the op ", op, " (a call goes in its family's file)"));
  }
  std::vector<OpCheckResult> results;
  for (size_t i = 0; i < calls.size(); ++i) {
    op_check::Call call(calls[i].op, calls[i].call, options.seed, i);
    calls[i].build(call);
    results.push_back(call.check(reference, device, options));
  }
  return results;
}

}  // namespace zaya
