#include "core/thread_governor.h"

#include <dirent.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

namespace zaya {

namespace {

constexpr double kWindowSeconds = 1.0;  // /proc/stat counts in ticks of 10 ms: a second holds 100 per core

// Seconds this process's threads have spent runnable but waiting for a core (the second field of each
// thread's /proc schedstat, in nanoseconds); 0 where the kernel does not report it (the governor then
// never drops a thread). A thread that has ended takes its count with it: differences are clamped at 0.
double waited_seconds_of_our_threads() {
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) return 0;
  unsigned long long waited_ns = 0;
  while (const dirent* entry = readdir(tasks)) {
    if (!std::isdigit(static_cast<unsigned char>(entry->d_name[0]))) continue;
    const std::string path = std::string("/proc/self/task/") + entry->d_name + "/schedstat";
    std::FILE* stat = std::fopen(path.c_str(), "r");
    if (!stat) continue;
    unsigned long long running = 0, waiting = 0;
    if (std::fscanf(stat, "%llu %llu", &running, &waiting) == 2) waited_ns += waiting;
    std::fclose(stat);
  }
  closedir(tasks);
  return 1e-9 * double(waited_ns);
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
  return {wall_now(), waited_seconds_of_our_threads(), idle_seconds_of_our_cores()};
}

int ThreadGovernor::decide(int threads, int max_threads, double wall, double waited, double idle_cpu) {
  if (wall <= 0) return threads;
  const double waiting = std::max(0.0, waited) / wall, idle = idle_cpu / wall;  // in cores
  // 0.4 cores' worth of waiting to run: another process holds a core. Beside one busy process our threads
  // waited 0.63 (small, 2 threads on 2 cores); beside lower-priority work, 0.03-0.07. The sum grows with the
  // thread count, noise included: measured on 2 cores only.
  if (threads > 1 && waiting > 0.4) return threads - 1;
  // Most of a core idle: it is free again.
  if (threads < max_threads && idle > 0.75) return threads + 1;
  return threads;
}

int ThreadGovernor::probe(int threads, int max_threads, int decided, Probe& state) {
  if (state.trying) {
    state.trying = false;
    state.every = decided < threads ? std::min(2 * state.every, Probe::kLongestWait) : Probe::kFirstTry;
    return decided;
  }
  if (decided != threads || threads >= max_threads) {
    state.quiet_windows = 0;
    return decided;
  }
  if (++state.quiet_windows < state.every) return threads;
  state.quiet_windows = 0;
  state.trying = true;
  return threads + 1;
}

int ThreadGovernor::after_step() {
  gave_back_ = false;
  // A decode step takes milliseconds: /proc/stat is read only once a window has passed.
  if (banked_.wall + wall_now() - since_.wall < kWindowSeconds) return threads_;
  const Clocks now = read_clocks();
  const Clocks window = banked_ + (now - since_);
  const bool was_trying = probe_.trying;
  const int decided = decide(threads_, max_threads_, window.wall, window.waited, window.idle_cpu);
  const int next = probe(threads_, max_threads_, decided, probe_);
  auto announce = [](int count, int before) {
    std::fprintf(stderr, "zaya: %s: %d thread%s instead of %d\n",
                 count < before ? "another process holds a core" : "a core is free again", count,
                 count == 1 ? "" : "s", before);
  };
  // A try and a failed try's return are not news; a try that held is a thread given back.
  if (was_trying && next == threads_) {
    announce(threads_, threads_ - 1);
    gave_back_ = true;
  } else if (!was_trying && !probe_.trying && next != threads_) {
    announce(next, threads_);
    gave_back_ = next > threads_;
  }
  if (next != threads_) {
    threads_ = next;
    omp_set_num_threads(threads_);
  }
  since_ = now;
  banked_ = {};
  return threads_;
}

void ThreadGovernor::pause() {
  banked_ = banked_ + (read_clocks() - since_);
}

void ThreadGovernor::resume() {
  since_ = read_clocks();
}

}  // namespace zaya
