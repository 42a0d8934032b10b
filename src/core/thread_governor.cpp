#include "core/thread_governor.h"

#include <omp.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace zaya {

namespace {

constexpr double kWindowSeconds = 1.0;  // /proc/stat counts in ticks of 10 ms: a second holds 100 per core

double seconds(const timeval& t) {
  return double(t.tv_sec) + 1e-6 * double(t.tv_usec);
}

// CPU seconds the cores this process may run on (its affinity) spent idle, from /proc/stat; 0 where it
// cannot be read. Cores outside the affinity do not count: idle there is no help.
double idle_seconds_of_our_cores() {
  cpu_set_t ours;
  CPU_ZERO(&ours);
  const bool pinned = sched_getaffinity(0, sizeof ours, &ours) == 0;
  std::FILE* stat = std::fopen("/proc/stat", "r");
  if (!stat) return 0;
  unsigned long long idle_ticks = 0;
  char line[512];
  while (std::fgets(line, sizeof line, stat)) {
    // Per-core lines only ("cpu3 ..."; not the "cpu ..." total or the lines after).
    if (std::strncmp(line, "cpu", 3) != 0 || !std::isdigit(static_cast<unsigned char>(line[3]))) continue;
    int cpu = -1;
    unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0;
    if (std::sscanf(line, "cpu%d %llu %llu %llu %llu %llu", &cpu, &user, &nice, &system, &idle, &iowait) < 5)
      continue;
    if (!pinned || (cpu < CPU_SETSIZE && CPU_ISSET(cpu, &ours))) idle_ticks += idle + iowait;
  }
  std::fclose(stat);
  return double(idle_ticks) / double(sysconf(_SC_CLK_TCK));
}

}  // namespace

ThreadGovernor::ThreadGovernor() : max_threads_(omp_get_max_threads()), threads_(max_threads_) {
  since_ = read_clocks();
}

double ThreadGovernor::wall_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ThreadGovernor::Clocks ThreadGovernor::read_clocks() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return {wall_now(), seconds(usage.ru_utime) + seconds(usage.ru_stime), idle_seconds_of_our_cores()};
}

int ThreadGovernor::decide(int threads, int max_threads, double wall, double process_cpu, double idle_cpu) {
  if (wall <= 0) return threads;
  const double share = process_cpu / wall, idle = idle_cpu / wall;  // in cores
  // Short of its threads by half a core with (almost) nothing idle: another process holds a core.
  if (threads > 1 && share < threads - 0.5 && idle < 0.25) return threads - 1;
  // Most of a core idle: it is free again.
  if (threads < max_threads && idle > 0.75) return threads + 1;
  return threads;
}

int ThreadGovernor::after_step() {
  // A decode step takes milliseconds: /proc/stat is read only once a window has passed.
  if (banked_.wall + wall_now() - since_.wall < kWindowSeconds) return threads_;
  const Clocks now = read_clocks();
  const double wall = banked_.wall + now.wall - since_.wall;
  const int next =
      decide(threads_, max_threads_, wall, banked_.process_cpu + now.process_cpu - since_.process_cpu,
             banked_.idle_cpu + now.idle_cpu - since_.idle_cpu);
  if (next != threads_) {
    std::fprintf(stderr, "zaya: %s: %d thread%s instead of %d\n",
                 next < threads_ ? "another process holds a core" : "a core is free again", next,
                 next == 1 ? "" : "s", threads_);
    threads_ = next;
    omp_set_num_threads(threads_);
  }
  since_ = now;
  banked_ = {};
  return threads_;
}

void ThreadGovernor::pause() {
  const Clocks now = read_clocks();
  banked_.wall += now.wall - since_.wall;
  banked_.process_cpu += now.process_cpu - since_.process_cpu;
  banked_.idle_cpu += now.idle_cpu - since_.idle_cpu;
}

void ThreadGovernor::resume() {
  since_ = read_clocks();
}

}  // namespace zaya
