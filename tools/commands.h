// Registration of the `forktrial` subcommands. Each subcommand lives in its own
// file and adds itself (options, help, callback) to the application.
#pragma once

#include <CLI/CLI.hpp>

namespace forktrial::tools {

void add_pack_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_trial_command(CLI::App& app);
void add_preflight_command(CLI::App& app);
void add_cluster_commands(CLI::App& app);

}  // namespace forktrial::tools
