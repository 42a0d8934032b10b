#pragma once
// The thread count for every parallel kernel (OpenMP and oneDNN share the OpenMP pool).

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

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

// The OpenMP thread count of the calling thread's task is `n` while this lives (n <= 0 leaves it as it is),
// then what it was: for a library that threads by itself (oneDNN) held to one thread, or a check run at a
// given count.
class ThreadCountScope {
 public:
  explicit ThreadCountScope(int n);
  ~ThreadCountScope();
  ThreadCountScope(const ThreadCountScope&) = delete;
  ThreadCountScope& operator=(const ThreadCountScope&) = delete;

 private:
  int previous_;
};

// fn(i) for every i in [0, count), on the OpenMP threads (dynamically scheduled). An exception must not leave
// a parallel region (that ends the process), so each is kept, and the first in index order is rethrown here
// once every index has run.
template <typename Fn>
void parallel_for_rethrowing(int64_t count, Fn&& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(count > 0 ? count : 0));
#pragma omp parallel for schedule(dynamic)
  for (int64_t i = 0; i < count; ++i) {
    try {
      fn(i);
    } catch (...) {
      errors[static_cast<size_t>(i)] = std::current_exception();
    }
  }
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

}  // namespace zaya
