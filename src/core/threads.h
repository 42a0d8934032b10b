#pragma once
// The thread count for every parallel kernel (OpenMP and oneDNN share the OpenMP pool).

namespace zaya {

// n <= 0 keeps the default (all cores, or OMP_NUM_THREADS).
void set_num_threads(int n);
int num_threads();

}  // namespace zaya
