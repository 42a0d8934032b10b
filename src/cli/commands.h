#pragma once
// Each subcommand lives in its own file and registers itself on the top-level app here. Registration
// binds the flags and sets the callback that CLI11 runs after a successful parse.

#include <stdexcept>
#include <string>

namespace CLI {
class App;
}

namespace zaya::cli {

// An error a command ends with under an exit code of its own (core/exit_codes.h; `main` prints the message
// as it prints every error, on one line).
class CommandFailed : public std::runtime_error {
 public:
  CommandFailed(int exit_code, const std::string& message)
      : std::runtime_error(message), exit_code_(exit_code) {}
  int exit_code() const { return exit_code_; }

 private:
  int exit_code_;
};

void add_bench_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_forward_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_info_command(CLI::App& app);
void add_init_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_prepare_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_tokenizer_command(CLI::App& app);
void add_train_command(CLI::App& app);

}  // namespace zaya::cli
