// `forktrial pack hash|verify|check`: pins and validation of pack directories.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "pack/bundle_hash.h"
#include "pack/pack_check.h"
#include "tools/cli_support.h"
#include "tools/commands.h"
#include "tools/terminal.h"

namespace forktrial::tools {
namespace {

struct PackOptions {
  std::string dir;
  bool content = false;
  bool json = false;
  bool executable = false;
  std::string expect;
};

void print_json(const nlohmann::json& value) {
  std::printf("%s\n", json_text(value, 2).c_str());
}

void run_hash(const PackOptions& o) {
  // Plain output computes only the hash asked for; --json reports both.
  pack::HashRequest request{.bundle = o.json || !o.content, .content = o.json || o.content};
  auto hashes = pack::hash_tree(o.dir, request);
  if (!hashes) throw CommandFailed(hashes.error().message);
  if (o.json) {
    print_json({{"path", o.dir},
                {"bundle_hash", hashes->bundle->str()},
                {"content_hash", hashes->content->str()},
                {"files", hashes->files},
                {"bytes", hashes->bytes}});
  } else {
    std::printf("%s\n", (o.content ? hashes->content : hashes->bundle)->str().c_str());
  }
}

// What to do about a pin that failed: the library says what failed and why.
std::string pin_advice(const pack::PinError& error) {
  switch (error.kind) {
    case pack::PinError::Kind::malformed_pin:
      return "\n`forktrial pack hash DIR` prints a pack's whole pin";
    case pack::PinError::Kind::mismatch:
      return "\nif the change is intended, pin the output of `forktrial pack hash DIR` instead";
    case pack::PinError::Kind::walk_failed:
      break;
  }
  return "";
}

void run_verify(const PackOptions& o) {
  auto verified = pack::verify_bundle_hash(o.expect, o.dir);
  if (o.json) {
    nlohmann::json out{{"path", o.dir}, {"expected", o.expect}, {"ok", verified.has_value()}};
    if (verified) out["actual"] = verified->str();
    if (!verified && verified.error().actual) out["actual"] = verified.error().actual->str();
    if (!verified) out["error"] = verified.error().message;
    print_json(out);
    if (!verified) throw CommandFailed(verified.error().message + pin_advice(verified.error()));
    return;
  }
  if (!verified) throw CommandFailed(verified.error().message + pin_advice(verified.error()));
  std::printf("ok: %s matches %s\n", terminal_safe(o.dir).c_str(), verified->str().c_str());
}

void run_check(const PackOptions& o) {
  const auto need =
      o.executable ? pack::RuntimeRequirement::required : pack::RuntimeRequirement::optional;
  pack::PackCheck check = pack::check_pack(o.dir, need);
  if (o.json) {
    nlohmann::json out{{"path", o.dir},
                       {"ok", check.ok()},
                       {"problems", check.problems},
                       {"warnings", check.warnings}};
    if (check.content_hash) out["content_hash"] = check.content_hash->str();
    if (check.recorded_content_hash) {
      out["recorded_content_hash"] = check.recorded_content_hash->str();
    }
    if (check.manifest) {
      out["name"] = check.manifest->name;
      out["version"] = check.manifest->version;
    }
    print_json(out);
  } else {
    for (const auto& warning : check.warnings) {
      std::fprintf(stderr, "warning: %s\n", terminal_text(warning).c_str());
    }
    if (check.ok()) {
      std::printf("ok: %s (%s %s), content hash %s\n", terminal_safe(o.dir).c_str(),
                  terminal_safe(check.manifest->name).c_str(),
                  terminal_safe(check.manifest->version).c_str(),
                  check.content_hash->str().c_str());
    }
  }
  if (!check.ok()) {
    std::string message = o.dir + ": " + std::to_string(check.problems.size()) +
                          (check.problems.size() == 1 ? " problem" : " problems") + ":";
    bool content_hash = false;
    for (const auto& problem : check.problems) {
      message += "\n  " + problem;
      content_hash = content_hash || problem.starts_with("pack.integrity.content_hash");
    }
    if (content_hash) {
      message +=
          "\nto record the files' content hash, write the output of `forktrial pack hash "
          "--content " +
          o.dir + "` into [pack.integrity].content_hash";
    }
    throw CommandFailed(message);
  }
}

}  // namespace

void add_pack_command(CLI::App& app) {
  auto options = std::make_shared<PackOptions>();
  CLI::App* pack = app.add_subcommand(
      "pack", "Hash, verify and check pack directories (manifest.toml + Lua code).");
  pack->require_subcommand(1);
  pack->footer(examples_footer({
      "forktrial pack hash examples/packs/greeter",
      "forktrial pack verify examples/packs/greeter --expect sha256:<64 hex>",
      "forktrial pack check examples/packs/greeter",
  }));

  CLI::App* hash = pack->add_subcommand(
      "hash",
      "Print the bundle hash of a pack directory: the pin that identifies its exact bytes,\n"
      "manifest.toml included. --content prints the content hash instead (manifest.toml\n"
      "excluded), the value a manifest records in [pack.integrity].content_hash.");
  hash->add_option("DIR", options->dir, "pack directory")->required();
  hash->add_flag("--content", options->content, "print the content hash (manifest excluded)");
  hash->add_flag("--json", options->json, "print both hashes, file count and bytes as JSON");
  hash->footer(examples_footer({
      "forktrial pack hash examples/packs/greeter",
      "forktrial pack hash --content examples/packs/greeter",
      "forktrial pack hash --json examples/packs/greeter",
  }));
  hash->callback([options] { run_hash(*options); });

  CLI::App* verify = pack->add_subcommand(
      "verify",
      "Check a pack directory against a bundle pin. Exits 0 when the directory hashes to\n"
      "the pin, non-zero with both hashes named when it does not.");
  verify->add_option("DIR", options->dir, "pack directory")->required();
  verify->add_option("--expect", options->expect, "the pin: sha256: + 64 lowercase hex")
      ->required();
  verify->add_flag("--json", options->json, "print the result as JSON");
  verify->footer(examples_footer({
      "forktrial pack verify examples/packs/greeter --expect $(forktrial pack hash "
      "examples/packs/greeter)",
  }));
  verify->callback([options] { run_verify(*options); });

  CLI::App* check = pack->add_subcommand(
      "check",
      "Validate a pack: every manifest.toml rule, the manifest's content_hash against the\n"
      "files, and the hash-walk rules (no symlinks, UTF-8 NFC names). Lists every problem\n"
      "and exits non-zero if there is any.");
  check->add_option("DIR", options->dir, "pack directory")->required();
  check->add_flag("--executable", options->executable,
                  "also require the [runtime] table a pack needs to be run in a trial");
  check->add_flag("--json", options->json, "print the result as JSON");
  check->footer(examples_footer({
      "forktrial pack check examples/packs/greeter",
      "forktrial pack check --executable --json examples/packs/greeter",
  }));
  check->callback([options] { run_check(*options); });
}

}  // namespace forktrial::tools
