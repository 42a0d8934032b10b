// `zaya train CONFIG.toml --run-dir DIR [--set section.key=value ...] [--print-param-groups]`: the main job.
// Resumes by itself when DIR holds a checkpoint. Its exit code says what happened (core/exit_codes.h): 0
// finished, 2 bad input (before training began), 1 an error while training, 3 diverged, 4 hung, 75 stopped by
// SIGINT or SIGTERM after its checkpoint. Started by an MPI launcher (`mpirun -np N zaya train ...`, `srun
// zaya train ...`), it trains data-parallel over the ranks; an error on any rank is printed with its rank and
// ends the whole job with that error's code.

#include <pthread.h>
#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include "cli/commands.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "dist/communicator.h"
#include "io/atomic_file.h"
#include "optim/param_groups.h"
#include "tokenizer/tokenizer.h"
#include "train/trainer.h"

namespace zaya::cli {
namespace {

std::atomic<bool> stop_requested{false};

extern "C" void request_stop(int) {
  stop_requested.store(true);
}

// SIGINT and SIGTERM, taken by one thread that does nothing but wait for them. Every thread started while
// this lives (OpenMP's, the checkpoint writer, MPI's) blocks them, so a signal never lands in the middle of
// a kernel, an allocation or a system call of the training. With the handler alone, about 1 SIGTERM in 15
// on a loaded machine ended in glibc's "corrupted size vs. prev_size" abort inside the optimizer's parallel
// region (oneDNN's sgemm freeing), and never without the signal. A thread running before this (none is,
// in zaya) still gets the handler.
class StopSignals {
 public:
  StopSignals() {
    std::signal(SIGINT, request_stop);
    std::signal(SIGTERM, request_stop);
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, &previous_);
    waiter_ = std::thread([this] {
      int signal = 0;
      while (sigwait(&signals_, &signal) == 0 && !closing_.load()) stop_requested.store(true);
    });
  }
  ~StopSignals() {
    closing_.store(true);
    pthread_kill(waiter_.native_handle(), SIGTERM);  // wakes the sigwait; it is blocked, so nothing else
    waiter_.join();
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  sigset_t signals_, previous_;
  std::atomic<bool> closing_{false};
  std::thread waiter_;
};

struct TrainArgs {
  std::string config, run_dir;
  std::vector<std::string> overrides;
  bool print_param_groups = false;
  bool force = false;
};

// The exit code an error ends a run with: an Error is an input found wrong before training began (the run
// throws RunFailure for its errors once training began); anything else (out of memory, a library's
// exception) is a failure.
int exit_code_of(const std::exception& error) {
  return dynamic_cast<const Error*>(&error) ? kExitBadInput : kExitFailed;
}

// Returns the exit code of the run's outcome (0, diverged or stopped); throws on an error.
int train(const TrainArgs& args) {
  const TrainConfig config = load_train_config(args.config, args.overrides);
  if (args.print_param_groups) {
    const Tokenizer tokenizer = Tokenizer::load(config.data.tokenizer);
    const ZayaConfig model = resolve_model_config(config, tokenizer.vocab_size(), tokenizer.pad_id(),
                                                  tokenizer.bos_id(), tokenizer.eos_id());
    std::printf("%s", describe_param_groups(
                          assign_param_groups(ParameterTable(model_dims(model)), config.optimizer.groups))
                          .c_str());
    return kExitDone;
  }
  if (args.run_dir.empty()) throw Error("is required to train").field("--run-dir");
  refuse_tasks_without_mpi();
  const StopSignals signals;  // before MPI and the training start their threads
  std::unique_ptr<Communicator> comm =
      launched_by_mpi() ? make_mpi_communicator() : make_single_process_communicator();
  TrainResult result;
  try {
    require_agreement(*comm, "the zaya version", ZAYA_VERSION);
    std::string run = read_text_file(args.config);
    for (const std::string& override_text : args.overrides) run += "\n--set " + override_text;
    require_agreement(*comm, "the run configuration (" + args.config + " and --set)", run);
    result = run_training(config, args.run_dir, stop_requested, *comm, args.force);
  } catch (const std::exception& e) {
    if (comm->size() == 1) throw;
    // The other ranks may be waiting in a collective: end them all, with the reason from this one.
    std::fprintf(stderr, "zaya: error on rank %d of %d: %s\n", comm->rank(), comm->size(), e.what());
    std::fflush(stderr);
    comm->abort(exit_code_of(e));
  }
  comm.reset();  // MPI is finalised before the exit
  if (result.outcome == TrainOutcome::Diverged) return kExitDiverged;
  if (result.outcome == TrainOutcome::Interrupted) return kExitStopped;
  return kExitDone;
}

void run_train(const TrainArgs& args) {
  int code = kExitDone;
  try {
    code = train(args);
  } catch (const Error& e) {  // a RunFailure, like any other exception, exits kExitFailed (main)
    throw CommandFailed(kExitBadInput, e.what());
  }
  if (code != kExitDone) std::exit(code);  // every object of the run is gone by now
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* command = app.add_subcommand("train",
                                         "train a model from a TOML run configuration (resumes by itself; "
                                         "data- and expert-parallel under mpirun or srun)");
  command->add_option("config", args->config, "the run's TOML file (see docs/CONFIG.md)")->required();
  command->add_option("--run-dir", args->run_dir, "where checkpoints, metrics and TensorBoard files go");
  command->add_option("--set", args->overrides, "override a key: section.key=value (repeatable)");
  command->add_flag("--print-param-groups", args->print_param_groups,
                    "print which optimizer each parameter gets, and exit");
  command->add_flag("--force", args->force,
                    "train in a --run-dir that holds files of someone else's (zaya touches only its own)");
  command->callback([args] { run_train(*args); });
}

}  // namespace zaya::cli
