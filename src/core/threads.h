#pragma once
// The thread count for every parallel kernel (OpenMP and oneDNN share the OpenMP pool).

#include <string>

namespace zaya {

// n <= 0 keeps the default (all cores, or OMP_NUM_THREADS).
void set_num_threads(int n);
// The cores this process may run on (its CPU affinity).
int available_cores();
// A thread count the user gave (`source` names where: "--threads", a config field; n <= 0 keeps the
// default): more threads than available cores only make them wait on each other at every barrier (a million
// would exhaust memory on thread stacks), so the count is clamped to the cores, with a warning on stderr.
void set_user_thread_count(int n, const std::string& source);
int num_threads();

}  // namespace zaya
