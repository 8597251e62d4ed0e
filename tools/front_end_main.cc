// forktrial: the command users run. It runs the coordinator's clients
// (client_commands.h) and --version itself, and executes forktrial-full, with
// the same arguments, for every other command and for the help of the whole.
// Linked without the store's, the trials' and the daemons' libraries
// (statically, but for the C library, where the build allows it), its start
// costs under twice a bare process's, so a script or a cluster manager that
// asks `forktrial status` in a loop no longer pays for thirty-odd shared
// libraries each time (bench/cli_start_bench;
// docs/decisions/0085-a-lean-front-end-for-the-client-commands.md).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>

#include "tools/application.h"
#include "tools/client_commands.h"

namespace {

namespace fs = std::filesystem;

constexpr const char* kFullProgram = "forktrial-full";

// forktrial-full, where a build tree puts it (beside this program) or an
// installation (in ../libexec/forktrial/, beside the trial child). This
// program's directory is /proc/self/exe's, or, without /proc (a chroot),
// that of the path it was run by.
fs::path full_program(const char* argv0) {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) {
    if (argv0 == nullptr || std::strchr(argv0, '/') == nullptr) return kFullProgram;
    self = argv0;
  }
  const fs::path dir = self.parent_path();
  for (const fs::path& candidate :
       {dir / kFullProgram, dir.parent_path() / "libexec" / "forktrial" / kFullProgram}) {
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return dir.parent_path() / "libexec" / "forktrial" / kFullProgram;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app;
  forktrial::tools::describe_app(app);
  // The command, when it is one of the clients', or --version, which needs none.
  const std::string_view first = argc < 2 ? "" : argv[1];
  if (first != "--version" && !forktrial::tools::add_client_command(app, first)) {
    const fs::path full = full_program(argv[0]);
    ::execv(full.c_str(), argv);
    const int error = errno;
    std::fprintf(stderr,
                 "forktrial: execv(%s): %s\nevery command but the coordinator's clients is "
                 "forktrial-full's, which is installed in ../libexec/forktrial/ from forktrial's "
                 "directory, or beside forktrial: install forktrial again\n",
                 full.c_str(), std::strerror(error));
    return 127;
  }
  return forktrial::tools::run_app(app, argc, argv);
}
