#pragma once
// What a zaya command's exit code says, for the scripts and schedulers that run it (docs/TRAINING.md, "Exit
// codes"): each outcome its own code, so that a job script knows whether to resubmit, fix its input or stop.

namespace zaya {

enum ExitCode : int {
  kExitDone = 0,      // finished (for zaya train: every stage, or nothing was left to do)
  kExitFailed = 1,    // an error while working; for zaya train, after training began: the last published
                      // checkpoint is intact and the same command resumes from it
  kExitBadInput = 2,  // the command line or, for zaya train, an input found wrong before training began (the
                      // config, the data, the tokenizer, the run directory): nothing was trained
  kExitDiverged = 3,  // zaya train: too many non-finite steps in a row (log.max_bad_steps)
  kExitHung = 4,      // zaya train: no progress for run.hang_timeout_s (a rank froze or lost its link)
  kExitStopped = 75,  // zaya train: stopped by SIGINT or SIGTERM after writing its checkpoint; the same
                      // command resumes (sysexits' EX_TEMPFAIL: try again later)
};

}  // namespace zaya
