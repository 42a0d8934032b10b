#include "core/threads.h"

#include <omp.h>

namespace zaya {

void set_num_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

int num_threads() {
  return omp_get_max_threads();
}

}  // namespace zaya
