// `zaya serve --model DIR [--host 127.0.0.1] [--port 8000] [--api-key KEY] [limits]`: the model behind an
// OpenAI-compatible HTTP API (docs/SERVING.md), until SIGINT or SIGTERM.

#include <arpa/inet.h>
#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <thread>

#include "backend/ops.h"
#include "cli/commands.h"
#include "cli/device_option.h"
#include "cli/model_with_tokenizer.h"
#include "cli/validators.h"
#include "core/error.h"
#include "core/exit_codes.h"
#include "model/decode_cache.h"
#include "model/zaya_model.h"
#include "serve/decode_engine.h"
#include "serve/http_server.h"

namespace zaya::cli {
namespace {

struct ServeArgs {
  std::string model, tokenizer;
  std::string device, precision;
  bool api_key_given = false;  // --api-key or ZAYA_API_KEY, even empty
  ServeOptions options;
};

// The most sequences decoded or waiting: a queued sequence holds its prompt, a running one its cache (also
// checked against the machine's memory once the model's shape is known).
constexpr int64_t kMostRunning = 1024, kMostQueued = 4096;

[[noreturn]] void refuse(const std::string& message) {
  throw CommandFailed(kExitBadInput, message);
}

// What the command line alone can say is wrong, before the model loads.
void check_options(const ServeArgs& args) {
  const ServeOptions& o = args.options;
  if (args.api_key_given && o.api_key.empty())
    refuse("--api-key (or ZAYA_API_KEY) is empty: give a key, or set neither to serve without one");
  unsigned char address[16];
  if (o.host != "localhost" && inet_pton(AF_INET, o.host.c_str(), address) != 1 &&
      inet_pton(AF_INET6, o.host.c_str(), address) != 1)
    refuse(cat("--host: '", o.host, "' is not an IPv4 or IPv6 address (or localhost)"));
  // A connection is a file descriptor: the soft limit is raised to the hard one, and must leave room for
  // the model's files and the server's own.
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  getrlimit(RLIMIT_NOFILE, &files);
  if (files.rlim_cur != RLIM_INFINITY && uint64_t(o.connections.max_connections) + 64 > files.rlim_cur)
    refuse(cat("--max-connections ", o.connections.max_connections,
               " needs more file descriptors than this process may open (", files.rlim_cur,
               ", less 64 for the server's own)"));
}

// The decode caches of --max-running sequences of a whole context each must fit the device's memory (the
// machine's RAM on the CPU).
void check_cache_memory(const ModelDims& dims, const ServeOptions& o, const Device& device) {
  const double needed =
      double(decode_cache_bytes_per_token(dims)) * double(o.context) * double(o.max_running);
  const double memory = double(device.memory_bytes);
  if (memory > 0 && needed > memory)
    refuse(cat("--max-running ", o.max_running, ": the decode caches of that many sequences of ", o.context,
               " tokens take ", int64_t(needed / 1e9), " GB, more than ",
               device.on_host() ? "this machine's " : "the device's ", int64_t(memory / 1e9), " GB"));
}

void run_serve(ServeArgs args) {
  // SIGINT and SIGTERM go to one thread that stops the server; every other thread (those created after
  // this) has them blocked. A client that leaves mid-write must not end the process (SIGPIPE).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  ModelWithTokenizer loaded = load_model_with_tokenizer(args.model, args.tokenizer, args.device,
                                                        args.precision, args.options.max_running);
  if (args.precision == "auto")
    std::fprintf(stderr, "zaya serve: %s\n", loaded.precision_description.c_str());
  ZayaModel model(loaded.params(), *loaded.device.ops, loaded.precision);
  ServeOptions& options = args.options;
  options.context = loaded.model.config.max_position_embeddings;
  check_cache_memory(model.params().dims(), options, loaded.device);
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
  CLI::Option* api_key =
      command
          ->add_option("--api-key", o.api_key, "require 'Authorization: Bearer KEY' (default: $ZAYA_API_KEY)")
          ->envname("ZAYA_API_KEY");
  command->add_option("--served-model-name", o.model_name,
                      "the model's name in the API (default: its directory's)");
  command->add_option("--max-running", o.max_running, "sequences decoded together")
      ->check(in_range(1, double(kMostRunning)));
  command->add_option("--max-queued", o.max_queued, "sequences waiting before requests are refused (503)")
      ->check(in_range(1, double(kMostQueued)));
  command->add_option("--timeout", o.request_timeout_s, "seconds a request may take (at most a day)")
      ->check(positive())
      ->check(in_range(0, 86400));
  // The limits on connections (docs/SERVING.md, "Limits").
  ConnectionLimits& c = o.connections;
  command
      ->add_option("--max-connections", c.max_connections, "open connections at most; more are refused (503)")
      ->check(in_range(1, 1 << 20));
  command
      ->add_option("--max-connections-per-client", c.max_connections_per_client,
                   "open connections from one IP address at most; more are refused (503)")
      ->check(in_range(1, 1 << 20));
  command->add_option("--header-timeout", c.header_timeout_s, "seconds to send a request's head (408 after)")
      ->check(positive())
      ->check(in_range(0, 3600));
  command->add_option("--body-timeout", c.body_timeout_s, "seconds to send a request's body (408 after)")
      ->check(positive())
      ->check(in_range(0, 3600));
  command
      ->add_option("--idle-timeout", c.idle_timeout_s,
                   "seconds a connection may wait between requests, or leave its answer unread")
      ->check(positive())
      ->check(in_range(0, 86400));
  command->add_option("--max-header-bytes", c.http.max_header_bytes, "a request's head at most (431 beyond)")
      ->check(in_range(1024, 1 << 20));
  command->add_option("--max-body-bytes", c.http.max_body_bytes, "a request's body at most (413 beyond)")
      ->check(in_range(1024, double(int64_t(1) << 30)));
  add_device_option(*command, args->device);
  add_precision_option(*command, args->precision);
  command->callback([args, api_key] {
    args->api_key_given = api_key->count() > 0 || std::getenv("ZAYA_API_KEY") != nullptr;
    check_options(*args);
    run_serve(*args);
  });
}

}  // namespace zaya::cli
