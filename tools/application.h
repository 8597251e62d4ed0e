// What the two forktrial programs share of main(): the application's
// description, --version and examples, and how a command's failure becomes a
// message on stderr and an exit status. Each program registers its commands
// between the two calls (main.cc: every command; front_end_main.cc: the
// coordinator's clients), so a command behaves the same in either.
#pragma once

#include <CLI/CLI.hpp>

namespace forktrial::tools {

// Gives `app` forktrial's description, --version flag and examples footer,
// and requires one command.
void describe_app(CLI::App& app);

// Parses argv and runs the command it names; the process's exit status:
// CLI11's for a usage error or --help, the command's own (ExitStatus,
// CommandFailed), or one decided by the category of an Error no command
// turned into its own message. Every message goes to stderr, made safe for
// a terminal.
int run_app(CLI::App& app, int argc, char** argv);

}  // namespace forktrial::tools
