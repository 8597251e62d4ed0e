// Registration of the `forktrial` subcommands. Each subcommand lives in its own
// file and adds itself (options, help, callback) to the application.
#pragma once

#include <CLI/CLI.hpp>

#include "sandbox/isolation.h"

namespace forktrial::tools {

// --isolation standard|strict (env FORKTRIAL_ISOLATION), on every command
// that runs trial children; sets `level`.
void add_isolation_option(CLI::App* cmd, sandbox::Isolation& level);

void add_pack_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_trial_command(CLI::App& app);
void add_preflight_command(CLI::App& app);
void add_cluster_commands(CLI::App& app);
void add_store_commands(CLI::App& app);  // gc, compact, store check

}  // namespace forktrial::tools
