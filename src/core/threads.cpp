#include "core/threads.h"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <thread>

namespace zaya {

void set_num_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

int num_threads() {
  return omp_get_max_threads();
}

ThreadCountScope::ThreadCountScope(int n) : previous_(omp_get_max_threads()) {
  if (n > 0) omp_set_num_threads(n);
}

ThreadCountScope::~ThreadCountScope() {
  omp_set_num_threads(previous_);
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

void set_user_thread_count(int n, const std::string& source) {
  const bool asked = n > 0;
  if (!asked) n = omp_get_max_threads();  // OMP_NUM_THREADS, or every core
  const int cores = available_cores();
  if (n > cores) {
    std::fprintf(stderr,
                 "zaya: %s asks for %d threads, more than the %d cores this process may use; using %d\n",
                 asked ? source.c_str() : "OMP_NUM_THREADS", n, cores, cores);
    n = cores;
  }
  omp_set_num_threads(n);
}

}  // namespace zaya
