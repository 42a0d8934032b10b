#include "dist/communicator.h"

#include "core/error.h"

namespace zaya {

std::vector<int64_t> even_counts(int64_t total, int parts) {
  std::vector<int64_t> counts(size_t(parts), total / parts);
  for (int64_t r = 0; r < total % parts; ++r) ++counts[size_t(r)];
  return counts;
}

void require_agreement(Communicator& comm, const std::string& what, const std::string& value) {
  const std::vector<std::string> values = comm.all_gather_strings(value);
  for (size_t r = 1; r < values.size(); ++r) {
    if (values[r] != values[0])
      throw Error(cat("ranks disagree on ", what, ": rank ", r, " differs from rank 0"));
  }
}

}  // namespace zaya
