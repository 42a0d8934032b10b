// `zaya serve --model DIR [--host 127.0.0.1] [--port 8000] [--api-key KEY]`: the model behind an
// OpenAI-compatible HTTP API (docs/SERVING.md), until SIGINT or SIGTERM.

#include <pthread.h>
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "backend/ops.h"
#include "cli/commands.h"
#include "cli/model_with_tokenizer.h"
#include "cli/validators.h"
#include "core/error.h"
#include "model/zaya_model.h"
#include "serve/decode_engine.h"
#include "serve/http_server.h"

namespace zaya::cli {
namespace {

struct ServeArgs {
  std::string model, tokenizer;
  std::string precision;
  ServeOptions options;
};

void run_serve(ServeArgs args) {
  // SIGINT and SIGTERM go to one thread that stops the server; every other thread (those created after
  // this) has them blocked. A client that leaves mid-write must not end the process (SIGPIPE).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  ModelWithTokenizer loaded =
      load_model_with_tokenizer(args.model, args.tokenizer, args.precision, args.options.max_running);
  if (args.precision == "auto")
    std::fprintf(stderr, "zaya serve: %s\n", loaded.precision_description.c_str());
  ZayaModel model(*loaded.model.params, cpu_ops(), loaded.precision);
  ServeOptions& options = args.options;
  options.context = loaded.model.config.max_position_embeddings;
  if (options.model_name.empty())
    options.model_name = std::filesystem::path(args.model).lexically_normal().filename().string();
  if (options.model_name.empty()) options.model_name = args.model;
  HttpServer server(model, loaded.tokenizer, options);
  const int port = server.bind();
  warm_up(model, {options.max_running, options.max_queued}, options.context);
  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    std::fprintf(stderr, "zaya serve: stopping (%s)\n", signal == SIGINT ? "SIGINT" : "SIGTERM");
    server.stop();
  });
  std::fprintf(stderr, "zaya serve: listening on http://%s:%d (model %s, context %lld tokens, %s%s)\n",
               options.host.c_str(), port, options.model_name.c_str(), (long long)options.context,
               std::string(precision_name(loaded.precision)).c_str(),
               options.api_key.empty() ? "" : ", API key required");
  if (options.api_key.empty() && options.host != "127.0.0.1" && options.host != "localhost" &&
      options.host != "::1")
    std::fprintf(stderr, "zaya serve: warning: listening beyond this machine without --api-key\n");
  std::fflush(stderr);
  server.run();
  // run() also returns when listening fails; the stopper thread then still waits for its signal.
  pthread_kill(stopper.native_handle(), SIGTERM);
  stopper.join();
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  ServeOptions& o = args->options;
  CLI::App* command = app.add_subcommand("serve", "serve a model over an OpenAI-compatible HTTP API");
  command->add_option("--model", args->model, "a model directory (with its tokenizer.json)")->required();
  command->add_option("--tokenizer", args->tokenizer, "tokenizer.json (default: the model directory's)");
  command->add_option("--host", o.host, "address to listen on (default: loopback only)");
  command->add_option("--port", o.port, "port (0: any free one; the chosen one is printed)")
      ->check(CLI::Range(0, 65535));
  command->add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' (default: $ZAYA_API_KEY)")
      ->envname("ZAYA_API_KEY");
  command->add_option("--served-model-name", o.model_name,
                      "the model's name in the API (default: its directory's)");
  command->add_option("--max-running", o.max_running, "sequences decoded together")->check(positive());
  command->add_option("--max-queued", o.max_queued, "sequences waiting before requests are refused (503)")
      ->check(positive());
  command->add_option("--timeout", o.request_timeout_s, "seconds a request may take")->check(positive());
  add_precision_option(*command, args->precision);
  command->callback([args] { run_serve(*args); });
}

}  // namespace zaya::cli
