// `zaya`: the command line. Parses, dispatches to one subcommand, and turns every failure into a one-line
// message: exit 2 for a bad command line, 1 for anything else that went wrong, or the code a command gave its
// error (zaya train's, core/exit_codes.h).

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <new>

#include "backend/devices.h"
#include "cli/commands.h"
#include "cli/validators.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "core/threads.h"

#if defined(ZAYA_GPU_BACKEND)
#include "backend/gpu/device.h"
#endif

int main(int argc, char** argv) {
#if defined(ZAYA_GPU_BACKEND)
  zaya::register_gpu_backend(zaya::gpu::backend());
#endif
  CLI::App app{"zaya: train Mixture-of-Experts language models of the ZAYA1 architecture", "zaya"};
  app.set_version_flag("--version", "zaya " ZAYA_VERSION);
  app.require_subcommand(1);
  app.fallthrough();
  int threads = 0;
  app.add_option("--threads", threads, "threads for kernels (default: all cores or OMP_NUM_THREADS)")
      ->check(zaya::cli::non_negative());
  app.parse_complete_callback([&] { zaya::set_user_thread_count(threads, "--threads"); });

  zaya::cli::add_bench_command(app);
  zaya::cli::add_eval_command(app);
  zaya::cli::add_export_command(app);
  zaya::cli::add_forward_command(app);
  zaya::cli::add_generate_command(app);
  zaya::cli::add_info_command(app);
  zaya::cli::add_init_command(app);
  zaya::cli::add_inspect_command(app);
  zaya::cli::add_prepare_command(app);
  zaya::cli::add_serve_command(app);
  zaya::cli::add_tokenizer_command(app);
  zaya::cli::add_train_command(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const bool unknown_command = app.get_subcommands().empty() && argc > 1 && argv[1][0] != '-';
    if (unknown_command) {
      std::fprintf(stderr, "zaya: unknown command '%s' (see 'zaya --help')\n", argv[1]);
    } else {
      std::fprintf(stderr, "zaya: %s (see 'zaya --help')\n", e.what());
    }
    return zaya::kExitBadInput;
  } catch (const zaya::cli::CommandFailed& e) {
    std::fprintf(stderr, "zaya: error: %s\n", e.what());
    return e.exit_code();
  } catch (const zaya::Error& e) {
    std::fprintf(stderr, "zaya: error: %s\n", e.what());
    return zaya::kExitFailed;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "zaya: error: out of memory\n");
    return zaya::kExitFailed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zaya: error: %s\n", e.what());
    return zaya::kExitFailed;
  }
  return zaya::kExitDone;
}
