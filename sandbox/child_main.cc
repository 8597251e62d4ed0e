// forktrial-child: runs one trial (or a preflight) in a fresh process.
//
// Order matters and is the contract with the parent (sandbox/trial.cc):
//   1. check that fd 3 (the tail) is open; read the whole job from stdin;
//   2. apply the kernel nets to itself, before anything else is allocated;
//      under strict isolation, first confine itself in the namespaces the
//      parent made (sandbox/confine.h: its own root, then a fork so that the
//      trial is not PID 1), and last drop its capabilities and load the
//      seccomp filter, under which everything after runs;
//   3. verify every pack's bundle pin — extra packs and candidate — before
//      reading any pack code, so a wrong pin loads nothing;
//   4. open the scratch store (which holds only the fork), load the packs,
//      run the scenario, appending every event to the scratch store as it is
//      produced (one transaction each: a crash keeps the prefix);
//   5. write the tail on fd 3 and exit 0/30/40/50 for completed /
//      scenario_failed / limits_exceeded / materialization_failed.
// Exit code 70 means the child could not even start (bad job, no fd 3); the
// parent reports that as a crash with this process's stderr.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <iterator>
#include <new>
#include <string>

#include "base/text.h"
#include "base/unique_fd.h"
#include "pack/bundle_hash.h"
#include "pack/pack_check.h"
#include "pack/pack_files.h"
#include "runtime/runtime.h"
#include "sandbox/confine.h"
#include "sandbox/job.h"
#include "sandbox/rlimits.h"
#include "sandbox/tail.h"
#include "store/event_store.h"

namespace forktrial::sandbox {
namespace {

constexpr int kTailFd = 3;
constexpr int kCannotStart = 70;

// Memory held from the start and given back just before the tail is
// encoded, so that a child whose address space ran out (RLIMIT_AS) can still
// write its tail: encoding allocates (Cap'n Proto's segments, the text's
// copies), and a tail that cannot be written turns any outcome into a crash.
// More than the largest tail (sandbox/tail.h) several times over.
constexpr std::size_t kTailReserveBytes = std::size_t{8} << 20;
void* tail_reserve = nullptr;

// Gives the reserve back; every path to the tail calls it before it
// allocates anything (a message, a copy of the tail).
void release_tail_reserve() {
  std::free(tail_reserve);
  tail_reserve = nullptr;
}

// Whether `what`, the message of an exception that ended the trial, says an
// allocation failed: the runtime's and the store's own (std::bad_alloc),
// Cap'n Proto's ("Memory allocation failed"), or a system call's or LMDB's
// ENOMEM. Under RLIMIT_AS, running out of memory anywhere is the memory net.
bool out_of_memory(std::string_view what) {
  for (std::string_view sign :
       {"std::bad_alloc", "Memory allocation failed", "Cannot allocate memory", "ENOMEM"}) {
    if (what.find(sign) != std::string_view::npos) return true;
  }
  return false;
}

#ifdef FORKTRIAL_CHILD_TEST_SEAMS
// The test build's switch: $FORKTRIAL_TEST_EXHAUST names the point ("start":
// before the packs load; "append": before the scratch store appends an event;
// "tail": before the tail is written) where the child takes every byte of
// address space RLIMIT_AS leaves it, so that the next allocation anywhere
// fails.
void exhaust_memory_at(std::string_view point) {
  const char* at = std::getenv("FORKTRIAL_TEST_EXHAUST");
  rlimit cap{};
  if (at == nullptr || point != at || ::getrlimit(RLIMIT_AS, &cap) != 0 ||
      cap.rlim_cur == RLIM_INFINITY) {
    return;  // only under the memory net: without it this would take the host's memory
  }
  // Held until the process ends, in a global so no compiler elides them.
  static void* volatile held[1 << 20];
  std::size_t count = 0;
  for (std::size_t size = std::size_t{64} << 20; size >= 64 && count < std::size(held);) {
    void* block = std::malloc(size);
    if (block == nullptr) {
      size /= 2;
    } else {
      held[count++] = block;
    }
  }
}
#else
void exhaust_memory_at(std::string_view) {}
#endif

void write_all(int fd, const std::string& bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = retry_eintr([&] { return ::write(fd, bytes.data() + done, bytes.size() - done); });
    if (n <= 0) return;  // the parent went away; the exit code still tells
    done += static_cast<std::size_t>(n);
  }
}

// The child's own diagnostics: stderr, every line prefixed and escaped, so
// they stand apart from the candidate's output, which the runtime writes to
// stdout one "[origin] text" line per call.
void diagnose(std::string_view message) {
  std::string out;
  for (std::string_view line : split_lines(message)) {
    out += "forktrial-child: " + escape_controls(line) + "\n";
  }
  write_all(STDERR_FILENO, out);
}

[[noreturn]] void finish(ChildTail tail) {
  exhaust_memory_at("tail");
  release_tail_reserve();
  write_all(kTailFd, encode_tail(tail));
  ::close(kTailFd);
  std::fflush(stdout);
  std::fflush(stderr);
  ::_exit(exit_code_of(tail.outcome));
}

std::string with_warnings(std::string detail, const std::vector<std::string>& warnings) {
  for (const auto& warning : warnings) {
    if (!detail.empty()) detail += "\n";
    detail += "warning: " + warning;
  }
  return detail;
}

// The trial's tail and the function that fills its counts, while a trial
// runs: what on_terminate reports with.
ChildTail* running_tail = nullptr;
const std::function<void()>* running_count = nullptr;

// The memory net stopped the child outside Lua: an allocation or the scratch
// store's map growth failed under RLIMIT_AS.
[[noreturn]] void finish_out_of_memory(ChildTail tail, std::string_view what) {
  release_tail_reserve();
  tail.outcome = Outcome::limits_exceeded;
  tail.net = Net::memory;
  tail.detail = with_warnings("memory net: " + std::string(what), tail.warnings);
  finish(tail);
}

// The real setrlimit, except where a net cannot apply: under a sanitizer, whose
// shadow memory cannot live under an address-space cap, RLIMIT_AS is refused
// (ENOTSUP) and announced like a host's refusal. A test build of this program
// (FORKTRIAL_CHILD_TEST_SEAMS, tests/sandbox) also refuses the nets named in
// $FORKTRIAL_TEST_REFUSE_NETS ("memory", "cpu") with EPERM, the way some hosts
// do; the forktrial-child that runs trials has no such switch.
// std::terminate's handler: an exception that could not propagate (thrown
// where none may be, or while another was handled) ends the trial. When it
// says memory ran out, that is the memory net, with a tail, as anywhere
// else; otherwise the child aborts, as it would have.
[[noreturn]] void on_terminate() {
  std::string what;
  bool memory = false;
  if (const std::exception_ptr current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const std::bad_alloc&) {
      memory = true;
    } catch (const store::StoreOutOfMemory&) {
      memory = true;
    } catch (const std::exception& e) {
      memory = out_of_memory(e.what());
      if (memory) what = e.what();
    } catch (...) {
    }
  }
  if (memory) {
    release_tail_reserve();
    ChildTail tail = running_tail != nullptr ? *running_tail : ChildTail{};
    if (running_count != nullptr) (*running_count)();
    if (running_tail != nullptr) tail = *running_tail;
    finish_out_of_memory(std::move(tail), "an allocation failed under RLIMIT_AS" +
                                              (what.empty() ? std::string() : " (" + what + ")") +
                                              ", where the child could not recover from it");
  }
  std::abort();
}

SetRlimit net_setter() {
  std::vector<std::string> refuse;
#ifdef FORKTRIAL_SANITIZED
  refuse.push_back("memory-sanitized");
#endif
#ifdef FORKTRIAL_CHILD_TEST_SEAMS
  if (const char* names = std::getenv("FORKTRIAL_TEST_REFUSE_NETS")) {
    for (std::string_view rest = names; !rest.empty();) {
      const auto comma = rest.find(',');
      refuse.emplace_back(rest.substr(0, comma));
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
#endif
  return [real = system_setrlimit(), refuse](int resource, const rlimit& limit) {
    auto refused = [&](const char* net) {
      return std::find(refuse.begin(), refuse.end(), net) != refuse.end();
    };
    if (resource == RLIMIT_AS && refused("memory-sanitized")) {
      errno = ENOTSUP;
      return -1;
    }
    if ((resource == RLIMIT_AS && refused("memory")) ||
        (resource == RLIMIT_CPU && refused("cpu"))) {
      errno = EPERM;
      return -1;
    }
    return real(resource, limit);
  };
}

// Step 3: every pack read once — its hashes computed and its code kept in
// the same read — then every pin and every manifest checked against those
// bytes, before any pack code runs. The runtime later loads the same bytes.
std::expected<std::vector<pack::PackFiles>, std::string> materialize(
    const TrialSpecification& spec) {
  std::vector<pack::PackFiles> materialized;
  for (const PackSource* pack : packs_in_load_order(spec)) {
    const std::string role = pack == &spec.candidate ? "candidate pack" : "extra pack";
    auto files = pack::PackFiles::read(pack->root_dir);
    if (!files) return std::unexpected(role + " " + pack->root_dir + ": " + files.error().message);
    if (pack->expected_bundle_hash) {
      auto verified = pack::compare_pin(pack->expected_bundle_hash->str(), files->bundle_hash(),
                                        pack->root_dir);
      if (!verified)
        return std::unexpected(role + " " + pack->root_dir + ": " + verified.error().message);
    }
    if (pack->manifest_required) {
      auto check = pack::check_pack(*files, pack::RuntimeRequirement::required);
      if (!check.ok()) {
        std::string message = role + " " + pack->root_dir + " fails its manifest check:";
        for (const auto& problem : check.problems) message += "\n  " + problem;
        return std::unexpected(message);
      }
    }
    materialized.push_back(std::move(*files));
  }
  return materialized;
}

// Steps 4 and 5 once the runtime holds the fork: load the packs, run the
// scenario, finish with the outcome. `count` fills the tail's numbers.
[[noreturn]] void run_trial(runtime::Runtime& rt, std::vector<pack::PackFiles>& packs,
                            const TrialSpecification& spec, const runtime::RuntimeConfig& config,
                            ChildTail& tail, const std::function<void()>& count) {
  for (std::size_t i = 0; i < packs.size(); ++i) {
    const bool candidate = i + 1 == packs.size();
    auto loaded = rt.load_pack(std::move(packs[i]),
                               candidate ? runtime::PackRole::candidate : runtime::PackRole::extra);
    if (!loaded) {
      count();
      if (loaded.error().memory_cap_hit) {
        tail.outcome = Outcome::limits_exceeded;
        tail.net = Net::memory;
      } else if (rt.write_budget_exhausted()) {
        tail.outcome = Outcome::limits_exceeded;
        tail.net = Net::write_budget;
      } else {
        tail.outcome = Outcome::materialization_failed;
      }
      tail.detail = with_warnings(loaded.error().message, tail.warnings);
      finish(tail);
    }
  }

  runtime::ScenarioResult result = rt.run_scenario(spec.scenario);
  count();
  tail.outcome = result.outcome;
  tail.net = result.net;
  if (result.outcome == Outcome::scenario_failed) {
    tail.detail = result.message;
    if (!result.traceback.empty()) tail.detail += "\n" + result.traceback;
  } else if (result.net == Net::event_budget) {
    tail.detail = "event budget exhausted: max_events = " + std::to_string(spec.limits.max_events) +
                  " events were dispatched (runtime.budget_exhausted is in the fork)";
  } else if (result.net == Net::write_budget) {
    tail.detail = "write budget exhausted: " + result.message;
  } else if (result.net == Net::memory) {
    tail.detail = "memory net: " + result.message;
    if (config.lua_memory_cap_bytes != 0) {
      tail.detail += " (the Lua memory cap is half of max_rss_bytes)";
    }
  }
  tail.detail = with_warnings(tail.detail, tail.warnings);
  finish(tail);
}

// Launch mode (ChildJob::exec_argv): confined and under the nets, this
// process becomes the program the parent chose, with the job's stdin. What
// did not apply goes to the parent as a tail's warnings on fd 3, closed
// before the exec so that nothing the program runs can write it.
[[noreturn]] void launch(const ChildJob& job) {
  ChildTail tail;
  if (job.strict) tail.warnings = enter_namespaces(confinement_for(job));
  for (auto& warning : apply_nets(job.limits, net_setter())) {
    tail.warnings.push_back(std::move(warning));
  }
  const int input = ::memfd_create("forktrial-exec-stdin", MFD_CLOEXEC);
  if (input < 0) {
    diagnose("memfd_create: " + errno_text(errno));
    ::_exit(kCannotStart);
  }
  write_all(input, job.exec_stdin);
  if (::lseek(input, 0, SEEK_SET) != 0 || ::dup2(input, STDIN_FILENO) != STDIN_FILENO) {
    diagnose("the program's stdin: " + errno_text(errno));
    ::_exit(kCannotStart);
  }
  ::close(input);
  std::vector<char*> argv;
  for (const auto& arg : job.exec_argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& entry : job.exec_env) envp.push_back(const_cast<char*>(entry.c_str()));
  envp.push_back(nullptr);
  if (job.strict) {
    for (auto& warning : lock_down(true)) tail.warnings.push_back(std::move(warning));
  }
  for (const auto& warning : tail.warnings)
    std::fprintf(stderr, "forktrial-child: %s\n", warning.c_str());
  tail.outcome = Outcome::completed;
  write_all(kTailFd, encode_tail(tail));
  ::close(kTailFd);
  std::fflush(stderr);
  ::execve(argv[0], argv.data(), envp.data());
  std::fprintf(stderr, "forktrial-child: execve(%s): %s\n", argv[0], errno_text(errno).c_str());
  ::_exit(kCannotStart);
}

int run(int, char**) {
  // A trial must not outlive the parent that supervises it (the wall-clock
  // kill lives there): die with it. The parent pid in the job closes the race
  // of a parent that died before this line.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::fcntl(kTailFd, F_GETFD) < 0) {
    std::fprintf(stderr,
                 "forktrial-child: fd 3 (the tail) is not open; run me through forktrial\n");
    return kCannotStart;
  }
  std::string input(std::istreambuf_iterator<char>(std::cin), {});
  auto job = decode_job(input);
  if (!job) {
    diagnose(job.error().message);
    return kCannotStart;
  }

  // In its own PID namespace the parent has no pid here (getppid() is 0);
  // the parent-death signal was set before exec instead (spawn.h).
  const bool own_pid_namespace = job->strict && in_strict_namespaces();
  if (job->parent_pid != 0 && !own_pid_namespace && ::getppid() != job->parent_pid) {
    std::fprintf(stderr, "forktrial-child: the parent process %d is gone\n", job->parent_pid);
    return kCannotStart;
  }

  if (!job->exec_argv.empty()) launch(*job);

  tail_reserve = std::malloc(kTailReserveBytes);
  std::set_terminate(on_terminate);
  ChildTail tail;
  if (job->strict) tail.warnings = enter_namespaces(confinement_for(*job));
  for (auto& warning : apply_nets(job->limits, net_setter())) {
    tail.warnings.push_back(std::move(warning));
  }
  if (job->strict) {
    for (auto& warning : lock_down()) tail.warnings.push_back(std::move(warning));
  }
  for (const auto& warning : tail.warnings)
    std::fprintf(stderr, "forktrial-child: %s\n", warning.c_str());

  runtime::RuntimeConfig config;
  config.max_events = job->limits.max_events;
  config.max_appended_events = job->limits.max_appended_events;
  config.max_appended_bytes = job->limits.max_appended_bytes;
  config.max_llm_calls = job->limits.max_llm_calls;
  if (job->limits.max_rss_bytes) {
    // Half the address-space cap, so the Lua allocator (which fails cleanly)
    // trips before the kernel limit starves the process image and the store.
    config.lua_memory_cap_bytes = static_cast<std::size_t>(*job->limits.max_rss_bytes / 2);
  }

  if (job->preflight) {
    config.run_id = store::RunId("preflight");
    auto runtime = runtime::Runtime::create(config, {}, [](const store::NewEvent&) {});
    if (!runtime) {
      std::fprintf(stderr, "forktrial-child: the runtime cannot start: %s\n",
                   runtime.error().message.c_str());
      return kCannotStart;
    }
    tail.outcome = Outcome::completed;
    tail.detail = with_warnings("preflight: the child started and applied its nets", tail.warnings);
    finish(tail);
  }
  const TrialSpecification& spec = *job->spec;

  auto packs = materialize(spec);
  if (!packs) {
    tail.outcome = Outcome::materialization_failed;
    tail.detail = with_warnings(packs.error(), tail.warnings);
    finish(tail);
  }

  store::EventStore scratch(job->scratch_store, scratch_store_options());
  const store::RunId fork_id(job->fork_run_id);
  std::vector<store::Event> history;
  std::uint64_t head = 0;
  {
    auto snapshot = scratch.snapshot();
    auto fork = snapshot.run(fork_id);
    if (!fork) {
      std::fprintf(stderr, "forktrial-child: the scratch store holds no run %s\n",
                   job->fork_run_id.c_str());
      return kCannotStart;
    }
    history = snapshot.history(*fork);
    head = fork->head;
  }

  auto sink = [&](const store::NewEvent& event) {
    exhaust_memory_at("append");
    auto appended = scratch.append(fork_id, head, event);
    if (!appended) throw store::StoreError(appended.error().message);
    head = *appended;
  };
  config.run_id = fork_id;
  config.trial_id = job->trial_id;
  auto created = runtime::Runtime::create(config, std::move(history), sink);
  if (!created) {
    tail.outcome = Outcome::materialization_failed;
    tail.detail = with_warnings(
        "the fork's history cannot be projected: " + created.error().message, tail.warnings);
    finish(tail);
  }
  runtime::Runtime& rt = **created;
  const std::function<void()> count = [&] {
    tail.events_appended = rt.events_appended();
    tail.behavior_failures = rt.behavior_failures();
    tail.last_seq = head;
  };
  running_tail = &tail;
  running_count = &count;

  try {
    exhaust_memory_at("start");
    run_trial(rt, *packs, spec, config, tail, count);
  } catch (const std::bad_alloc&) {
    release_tail_reserve();
    count();
    finish_out_of_memory(tail, "an allocation failed under RLIMIT_AS");
  } catch (const store::StoreOutOfMemory& e) {
    release_tail_reserve();
    count();
    finish_out_of_memory(
        tail, std::string("the scratch store ran out of address space (") + e.what() + ")");
  } catch (const std::exception& e) {
    if (!out_of_memory(e.what())) throw;
    release_tail_reserve();
    count();
    finish_out_of_memory(tail,
                         std::string("an allocation failed under RLIMIT_AS (") + e.what() + ")");
  }
}

}  // namespace
}  // namespace forktrial::sandbox

int main(int argc, char** argv) {
  try {
    return forktrial::sandbox::run(argc, argv);
  } catch (const std::bad_alloc&) {
    // The address-space net refused an allocation outside Lua.
    forktrial::sandbox::finish_out_of_memory({}, "an allocation failed under RLIMIT_AS");
  } catch (const forktrial::store::StoreOutOfMemory& e) {
    // The scratch store's map could not grow under RLIMIT_AS.
    forktrial::sandbox::release_tail_reserve();
    forktrial::sandbox::finish_out_of_memory(
        {}, std::string("the scratch store ran out of address space (") + e.what() + ")");
  } catch (const std::exception& e) {
    if (forktrial::sandbox::out_of_memory(e.what())) {
      forktrial::sandbox::release_tail_reserve();
      forktrial::sandbox::finish_out_of_memory(
          {}, std::string("an allocation failed under RLIMIT_AS (") + e.what() + ")");
    }
    forktrial::sandbox::diagnose(e.what());
    return 1;
  }
}
