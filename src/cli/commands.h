#pragma once
// Each subcommand lives in its own file and registers itself on the top-level app here. Registration
// binds the flags and sets the callback that CLI11 runs after a successful parse.

namespace CLI {
class App;
}

namespace zaya::cli {

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
