#pragma once
// Keeps a step from collapsing when other processes take cores. Every parallel region of a step waits for
// its slowest thread; when a core is shared with another process, that thread runs at a fraction of its
// speed and the others wait for it (spinning, as OpenMP does between the thousands of regions of a step),
// so N threads ran 2.3x slower than N - 1 here. After each step the governor reads how long the process's
// threads waited to run (the scheduler's run delay): 0.4 cores' worth of waiting per second means another
// process holds a core, and a thread is dropped; a core left idle lets one back, up to the count it started
// with. Waiting, not CPU time, is the signal: a process of lower priority fills every idle moment (the serial
// parts of a step, a server's HTTP work) without ever keeping a thread of ours from running. Such a process
// also hides a core that the busy one has left, so while a thread short the governor now and then tries one
// more for a window, and keeps it if nobody waited (tries further apart each time one fails).

namespace zaya {

class ThreadGovernor {
 public:
  // Governs the OpenMP thread count, starting at (and never above) the current one.
  ThreadGovernor();

  // After a step: adjusts the thread count for the next one (decisions need about a second of steps, so
  // short steps are pooled; between decisions this reads only the clock). Returns the count now in force.
  int after_step();
  // Whether the last after_step gave a thread back for good (a core is free again; not a try for one): the
  // machine is quieter, a moment to measure it (the MFU denominator).
  bool gave_back() const { return gave_back_; }

  // The process waits for work (a server between requests) from pause() to resume(): that time is left
  // out of the decisions, which it would dilute; the busy time on either side counts towards one window.
  void pause();
  void resume();

  // The decision alone, for `threads` over `wall` seconds in which the process's threads spent `waited`
  // seconds runnable but not running, and the cores it may run on left `idle_cpu` CPU seconds unused.
  static int decide(int threads, int max_threads, double wall, double waited, double idle_cpu);

  // The tries for a thread back while short of threads with no core idle. `decided` is decide()'s count
  // for the window just ended; returns the count for the next one.
  struct Probe {
    static constexpr int kFirstTry = 30, kLongestWait = 600;  // in windows
    int quiet_windows = 0;                                    // windows short of threads since the last try
    int every = kFirstTry;  // windows between tries: doubled after each failed one, up to kLongestWait
    bool trying = false;    // the window just ended ran one thread more, to see
  };
  static int probe(int threads, int max_threads, int decided, Probe& state);

 private:
  struct Clocks {
    double wall = 0, waited = 0, idle_cpu = 0;
    Clocks operator-(const Clocks& o) const {
      return {wall - o.wall, waited - o.waited, idle_cpu - o.idle_cpu};
    }
    Clocks operator+(const Clocks& o) const {
      return {wall + o.wall, waited + o.waited, idle_cpu + o.idle_cpu};
    }
  };
  static Clocks read_clocks();
  static double wall_now();

  int max_threads_, threads_;
  bool gave_back_ = false;
  Probe probe_;
  Clocks since_;   // the clocks when the current busy stretch began
  Clocks banked_;  // the window's earlier busy stretches (before a pause), as differences
};

}  // namespace zaya
