#include "sandbox/trial_types.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "sandbox/job.h"

using namespace forktrial;
using namespace forktrial::sandbox;
using Texts = std::vector<std::string>;

namespace {

const std::string kPin = "sha256:" + std::string(64, 'b');

TrialSpecification sample() {
  TrialSpecification spec;
  spec.parent_run_id = forktrial::store::RunId("run_1");
  spec.at_event = forktrial::store::EventId("evt_003");
  spec.label = "candidate-7";
  spec.candidate = {"/packs/candidate", forktrial::Digest::parse(kPin), true};
  spec.extra_packs = {{"/packs/trusted", std::nullopt, false}};
  spec.scenario = "scenarios/replay.lua::main";
  spec.limits.wall_clock_seconds = 2.5;
  spec.limits.max_rss_bytes = 268435456;
  spec.limits.max_events = 50;
  spec.limits.env_passthrough = {"TZ"};
  return spec;
}

Texts problems(const std::string& json) {
  auto parsed = parse_trial_specification(json);
  REQUIRE_FALSE(parsed.has_value());
  return parsed.error().list;
}

}  // namespace

TEST_CASE("a trial specification round-trips through canonical JSON", "[sandbox][spec]") {
  const TrialSpecification spec = sample();
  const std::string text = to_canonical_json(spec);
  CHECK(
      text ==
      R"({"at_event":"evt_003","candidate":{"expected_bundle_hash":")" + kPin +
          R"(","manifest_required":true,"root_dir":"/packs/candidate"},"extra_packs":[{"expected_bundle_hash":null,"manifest_required":false,"root_dir":"/packs/trusted"}],"label":"candidate-7","limits":{"env_passthrough":["TZ"],"max_appended_bytes":67108864,"max_appended_events":100000,"max_cpu_seconds":null,"max_events":50,"max_llm_calls":0,"max_rss_bytes":268435456,"wall_clock_seconds":2.5},"parent_run_id":"run_1","scenario":"scenarios/replay.lua::main","schema_version":1})");
  auto parsed = parse_trial_specification(text);
  REQUIRE(parsed.has_value());
  CHECK(*parsed == spec);
  CHECK(to_canonical_json(*parsed) == text);
}

TEST_CASE("key order and whitespace do not change the canonical form", "[sandbox][spec]") {
  auto parsed = parse_trial_specification(
      R"({ "schema_version": 1, "candidate": {"root_dir": "/p"}, "at_event": "e",
           "parent_run_id": "r" })");
  REQUIRE(parsed);
  CHECK(parsed->label == "trial");
  CHECK(parsed->limits.max_events == 2000);
  CHECK(parsed->limits.wall_clock_seconds == 120);
  CHECK(parsed->candidate.manifest_required);
  auto again = parse_trial_specification(to_canonical_json(*parsed));
  REQUIRE(again);
  CHECK(to_canonical_json(*again) == to_canonical_json(*parsed));
}

TEST_CASE("an empty object names every missing field", "[sandbox][spec]") {
  CHECK(problems("{}") == Texts{"schema_version: missing", "parent_run_id: missing",
                                "at_event: missing", "candidate: missing"});
}

TEST_CASE("a specification activegraph wrote parses, store_path kept and unused",
          "[sandbox][spec]") {
  // activegraph's TrialSpecification.to_json for a fresh TrialLimits and an
  // unpinned pack_source.
  auto parsed = parse_trial_specification(
      R"({"at_event":"evt_010","extra_packs":[{"expected_bundle_hash":")" + kPin +
      R"(","manifest_required":true,"root_dir":"/packs/trusted"}],"label":"trial",)"
      R"("limits":{"env_passthrough":["TZ"],"max_events":null,"max_llm_calls":null,)"
      R"("max_rss_bytes":null,"wall_clock_seconds":120.0},"pack_source":{)"
      R"("expected_bundle_hash":"","manifest_required":false,"root_dir":"/packs/candidate"},)"
      R"("parent_run_id":"run_chat","scenario":"scenarios/replay.py::main","schema_version":1,)"
      R"("store_path":"/data/activegraph.db"})");
  REQUIRE(parsed.has_value());
  CHECK(parsed->parent_run_id.str() == "run_chat");
  CHECK(parsed->at_event.str() == "evt_010");
  CHECK(parsed->candidate == PackSource{"/packs/candidate", std::nullopt, false});
  CHECK(parsed->extra_packs ==
        std::vector<PackSource>{{"/packs/trusted", forktrial::Digest::parse(kPin), true}});
  CHECK(parsed->store_path == std::optional<std::string>("/data/activegraph.db"));
  CHECK(parsed->limits.wall_clock_seconds == 120.0);
  CHECK(parsed->limits.max_rss_bytes == std::nullopt);
  CHECK(parsed->limits.max_events == 0);
  CHECK(parsed->limits.max_llm_calls == 0);
  CHECK(parsed->limits.env_passthrough == std::vector<std::string>{"TZ"});
  // forktrial writes its own form: no store_path, the pack as candidate.
  const std::string canonical = to_canonical_json(*parsed);
  CHECK(canonical.find("store_path") == std::string::npos);
  CHECK(canonical.find(R"("candidate":{"expected_bundle_hash":null,)") != std::string::npos);
}

TEST_CASE("candidate and pack_source together, or an unknown field, are refused",
          "[sandbox][spec]") {
  const std::string pack = R"({"root_dir":"/p"})";
  CHECK(problems(R"({"schema_version":1,"parent_run_id":"r","at_event":"e","candidate":)" + pack +
                 R"(,"pack_source":)" + pack + "}") ==
        Texts{"candidate, pack_source: both given; give the candidate pack once, as candidate "
              "(forktrial) or pack_source (activegraph)"});
  CHECK(problems(R"({"schema_version":1,"parent_run_id":"r","at_event":"e","pack_source":)" + pack +
                 R"(,"store_path":"s","executor":"k8s"})") ==
        Texts{"executor: unknown field (this build reads trial specification schema_version 1)"});
  CHECK(problems(R"({"schema_version":1,"parent_run_id":"r","at_event":"e","pack_source":)" + pack +
                 R"(,"store_path":7})") == Texts{"store_path: must be a string, got an integer"});
}

TEST_CASE("wrong types are refused with the field named", "[sandbox][spec]") {
  CHECK(
      problems(R"({"schema_version":1,"parent_run_id":7,"at_event":"e",
      "candidate":{"root_dir":"/p","manifest_required":"yes","expected_bundle_hash":"sha256:AB"},
      "limits":{"max_events":"many","max_rss_bytes":-1,"wall_clock_seconds":"1",
                "env_passthrough":["OK_NAME","BAD=1"]},
      "extra_packs":{}, "colour":"red"})") ==
      Texts{"parent_run_id: must be a string, got an integer",
            "candidate.expected_bundle_hash: malformed pin \"sha256:AB\": it must have exactly 64 "
            "hex digits after \"sha256:\", found 2",
            "candidate.manifest_required: must be true or false, got a string",
            "extra_packs: must be an array, got an object",
            "limits.wall_clock_seconds: must be a number of seconds (0 disables the net), got a "
            "string",
            "limits.max_rss_bytes: must be a non-negative integer or null, got an integer",
            "limits.max_events: must be a non-negative integer, got a string",
            "limits.env_passthrough[1]: must be an environment variable name (letters, digits, "
            "'_'), got \"BAD=1\"",
            "colour: unknown field (this build reads trial specification schema_version 1)"});
}

TEST_CASE("schema_version 2 is refused before anything else is read", "[sandbox][spec]") {
  CHECK(problems(R"({"schema_version":2,"anything":"goes"})") ==
        Texts{"schema_version: this build reads trial specifications of version 1, got 2; "
              "run a forktrial that supports it"});
  CHECK(problems("[1]") == Texts{"trial specification: must be a JSON object, got an array"});
  CHECK(problems("{") == Texts{"trial specification: not valid JSON"});
}

TEST_CASE("outcomes map to the child's exit codes and back", "[sandbox]") {
  CHECK(exit_code_of(Outcome::completed) == 0);
  CHECK(exit_code_of(Outcome::scenario_failed) == 30);
  CHECK(exit_code_of(Outcome::limits_exceeded) == 40);
  CHECK(exit_code_of(Outcome::materialization_failed) == 50);
  CHECK(outcome_of_exit_code(40) == Outcome::limits_exceeded);
  CHECK(outcome_of_exit_code(1) == Outcome::crashed);
  CHECK(outcome_of_exit_code(139) == Outcome::crashed);
  CHECK(outcome_from_name("materialization_failed") == Outcome::materialization_failed);
  CHECK_FALSE(outcome_from_name("ok"));
}

TEST_CASE("a child's job round-trips through its encoding, with and without a specification",
          "[sandbox][job]") {
  ChildJob job;
  job.limits = sample().limits;
  job.spec = sample();
  job.fork_run_id = "run_trial_\"quoted\"";
  job.fork_seq = 3;
  job.scratch_store = "/tmp/forktrial-scratch-abc123/store";
  job.trial_id = "run_trial_1";
  job.parent_pid = 42;
  job.strict = true;
  job.strict_root = "/tmp/forktrial-scratch-abc123/root";
  job.exec_argv = {"python3", "-m", "child"};
  job.exec_env = {"PATH=/usr/bin"};
  job.exec_stdin = "{}";
  job.exec_read_only = {"/usr/lib/python3"};
  const std::string text = encode_job(job);
  CHECK(nlohmann::json::parse(text).size() == 11);
  auto decoded = decode_job(text);
  REQUIRE(decoded.has_value());
  CHECK(*decoded == job);

  ChildJob preflight;
  preflight.preflight = true;
  auto decoded_preflight = decode_job(encode_job(preflight));
  REQUIRE(decoded_preflight.has_value());
  CHECK(*decoded_preflight == preflight);
  CHECK(nlohmann::json::parse(encode_job(preflight))["specification"].is_null());
}
