#include "dist/communicator.h"

#include <unistd.h>

#include <algorithm>

#include "core/error.h"

namespace zaya {

Share even_share(int64_t total, int parts, int index) {
  const int64_t base = total / parts, extra = total % parts;  // the first `extra` parts get one more
  return {index * base + std::min<int64_t>(index, extra), base + (index < extra ? 1 : 0)};
}

void require_agreement(Communicator& comm, const std::string& what, const std::string& value) {
  const std::vector<std::string> values = comm.all_gather_strings(value);
  for (size_t r = 1; r < values.size(); ++r) {
    if (values[r] != values[0])
      throw Error(cat("ranks disagree on ", what, ": rank ", r, " differs from rank 0"));
  }
}

std::string host_name() {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace zaya
