// forktrial-full: every forktrial command. The `forktrial` front end
// (front_end_main.cc) runs the coordinator's clients itself and executes this
// program, with the same arguments, for every other command.
#include <malloc.h>

#include "tools/application.h"
#include "tools/commands.h"

int main(int argc, char** argv) {
  // Built without jemalloc, large blocks always come from mmap, already
  // zeroed. glibc otherwise raises the threshold past any block freed, and
  // LMDB's 2 MiB dirty list, calloc'd at every store opened for writing (each
  // trial's scratch store), would then be served from the heap and cleared
  // byte by byte. With jemalloc this does nothing.
  ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  CLI::App app;
  forktrial::tools::describe_app(app);
  forktrial::tools::add_pack_command(app);
  forktrial::tools::add_run_command(app);
  forktrial::tools::add_trial_command(app);
  forktrial::tools::add_preflight_command(app);
  forktrial::tools::add_cluster_commands(app);
  forktrial::tools::add_store_commands(app);
  return forktrial::tools::run_app(app, argc, argv);
}
