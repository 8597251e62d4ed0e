// rt:emit and graph:emit against hostile candidates: the text rules every
// event field follows, and the types and actors only forktrial may write.
#include <catch2/catch.hpp>

#include "tests/runtime/runtime_test_support.h"

using namespace forktrial::testing;
using forktrial::Outcome;
using forktrial::runtime::PackRole;

namespace {

// Two packs: "alpha" (an extra pack with behavior "relay") and the candidate
// "beta", whose scenario runs the Lua list `attempts` with rt, then emits
// "probe", whose behavior "probe" runs the same list with its graph. An
// attempt is a function of the emitter; each logs "accepted" or the error it
// raised.
struct Emitters {
  TempDir dir;
  std::unique_ptr<Recorded> r = make_runtime();

  explicit Emitters(const std::string& attempts) {
    PackSpec alpha;
    alpha.name = "alpha";
    alpha.behaviors = {"relay"};
    alpha.pack_lua = pack_header(alpha) +
                     "pack:behavior{ name = 'relay', on = {'never'}, run = function() end }\n"
                     "return pack\n";
    PackSpec beta;
    beta.name = "beta";
    beta.behaviors = {"probe"};
    beta.files["attempts.lua"] = "local attempts = {\n" + attempts + R"(}
return function(emitter)
  for _, attempt in ipairs(attempts) do
    local ok, err = pcall(attempt, emitter)
    print(ok and "accepted" or err)
  end
end
)";
    beta.pack_lua = pack_header(beta) + R"(
local try_all = require("attempts")
pack:behavior{ name = "probe", on = {"probe"}, run = function(event, graph, ctx)
  try_all(graph)
end }
return pack
)";
    beta.files["s.lua"] = R"(
function main(rt)
  require("attempts")(rt)
  rt:emit{ type = "probe" }
  rt:run_until_idle()
end
)";
    load_or_fail(*r, write_pack(dir, "alpha", alpha), PackRole::extra);
    load_or_fail(*r, write_pack(dir, "beta", beta), PackRole::candidate);
    const auto result = r->rt->run_scenario("s.lua");
    INFO(result.message);
    REQUIRE(result.outcome == Outcome::completed);
    REQUIRE(result.behavior_failures == 0);
  }
  // The logged outcome of each attempt, without the "[origin] " prefix.
  std::vector<std::string> outcomes(const std::string& origin) const {
    std::vector<std::string> out;
    for (const auto& line : r->log) {
      const std::string prefix = "[" + origin + "] ";
      if (line.starts_with(prefix)) out.push_back(line.substr(prefix.size()));
    }
    return out;
  }
  // Calls check(outcomes, call) for the scenario's rt:emit attempts and the
  // behavior's graph:emit attempts, each of which logged `count` outcomes.
  template <typename Check>
  void each(std::size_t count, Check&& check) const {
    for (const auto& [origin, call] :
         {std::pair{"scenario", "rt:emit"}, std::pair{"beta.probe", "graph:emit"}}) {
      INFO(call);
      const auto logged = outcomes(origin);
      REQUIRE(logged.size() == count);
      check(logged, std::string(call));
    }
  }
};

// The attempt e:emit<spec>: rt:emit in the scenario, graph:emit in the behavior.
std::string attempt(const std::string& spec) {
  return "function(e) e:emit" + spec + " end,\n";
}

void check_refused(const std::string& outcome, const std::string& call, const std::string& why) {
  INFO(outcome);
  CHECK_THAT(outcome, Catch::Contains(call + ": ") && Catch::Contains(why));
  CHECK(outcome.size() < 400);  // the value is quoted as a short excerpt
}

}  // namespace

TEST_CASE("emit refuses a type or actor that is not valid UTF-8, naming the field",
          "[runtime][emit]") {
  const std::string attempts = attempt("{ type = 'caf\\xE9' }") +
                               attempt("{ type = 'ok', actor = '\\xFF\\xFE' }") +
                               attempt("{ type = '\\xED\\xA0\\x80' }");
  Emitters e(attempts);
  e.each(3, [](const std::vector<std::string>& outcomes, const std::string& call) {
    check_refused(outcomes[0], call,
                  "field \"type\" \"caf\\xe9\" is not valid UTF-8 (byte 0xE9 at offset 3)");
    check_refused(outcomes[1], call,
                  "field \"actor\" \"\\xff\\xfe\" is not valid UTF-8 (byte 0xFF at offset 0)");
    check_refused(outcomes[2], call, "field \"type\"");
  });
  CHECK(e.r->work_types() ==
        std::vector<std::string>{"pack.loaded", "pack.loaded", "probe", "runtime.idle"});
}

TEST_CASE("emit refuses a type or actor holding control characters, naming the field",
          "[runtime][emit]") {
  const std::string attempts =
      attempt("{ type = 'a\\0b' }") +
      attempt("{ type = 'ok', actor = '\\27[2J\\27[Houtcome completed' }") +
      attempt("{ type = 'two\\nlines' }") + attempt("{ type = 'ok', actor = 'csi \\xC2\\x9B' }") +
      attempt("{ type = 'del\\127' }");
  Emitters e(attempts);
  e.each(5, [](const std::vector<std::string>& outcomes, const std::string& call) {
    check_refused(outcomes[0], call,
                  "field \"type\" \"a\\x00b\" contains the control character U+0000 at offset 1");
    check_refused(outcomes[1], call,
                  "field \"actor\" \"\\x1b[2J\\x1b[Houtcome completed\" contains the control "
                  "character U+001B at offset 0");
    check_refused(outcomes[2], call, "contains the control character U+000A at offset 3");
    check_refused(outcomes[3], call,
                  "field \"actor\" \"csi \\u{9b}\" contains the control character U+009B");
    check_refused(outcomes[4], call, "contains the control character U+007F at offset 3");
  });
  CHECK(e.r->work_types() ==
        std::vector<std::string>{"pack.loaded", "pack.loaded", "probe", "runtime.idle"});
}

TEST_CASE("emit refuses a type or actor beyond the length bound", "[runtime][emit]") {
  const std::string attempts = attempt("{ type = string.rep('t', 16 << 20) }") +
                               attempt("{ type = 'ok', actor = string.rep('a', 1025) }") +
                               attempt(
                                   "{ type = string.rep('t', 1024), actor = string.rep('a', "
                                   "1022) .. '\\xC3\\xA9' }");
  Emitters e(attempts);
  e.each(3, [](const std::vector<std::string>& outcomes, const std::string& call) {
    check_refused(outcomes[0], call,
                  "field \"type\" \"" + std::string(40, 't') +
                      "...\" is 16777216 bytes long; the limit is 1024");
    check_refused(outcomes[1], call, "field \"actor\"");
    check_refused(outcomes[1], call, "is 1025 bytes long; the limit is 1024");
    CHECK(outcomes[2] == "accepted");
  });
  REQUIRE(e.r->of_type(std::string(1024, 't')).size() == 2);
}

TEST_CASE("a candidate cannot emit the event types forktrial writes", "[runtime][emit]") {
  const std::string attempts =
      attempt("{ type = 'trial.wall_clock_exhausted', payload = { wall_clock_seconds = 1 } }") +
      attempt("{ type = 'trial.anything' }") + attempt("{ type = 'forktrial.note' }") +
      attempt("{ type = 'runtime.idle' }") + attempt("{ type = 'behavior.failed' }") +
      attempt("{ type = 'pack.loaded' }") + attempt("{ type = 'object.created' }") +
      attempt("{ type = 'trials.mine' }") + attempt("{ type = 'forktrialish' }");
  Emitters e(attempts);
  e.each(9, [](const std::vector<std::string>& outcomes, const std::string& call) {
    check_refused(outcomes[0], call,
                  "event type \"trial.wall_clock_exhausted\" is reserved: types starting with "
                  "\"trial.\" are written only by the trial's parent process");
    check_refused(outcomes[1], call, "event type \"trial.anything\" is reserved");
    check_refused(outcomes[2], call,
                  "event type \"forktrial.note\" is reserved: types starting with "
                  "\"forktrial.\" are written only by forktrial");
    std::size_t i = 3;
    for (const std::string type :
         {"runtime.idle", "behavior.failed", "pack.loaded", "object.created"}) {
      check_refused(outcomes[i++], call,
                    "event type \"" + type + "\" is written only by the runtime");
    }
    CHECK(outcomes[7] == "accepted");
    CHECK(outcomes[8] == "accepted");
  });
  CHECK(e.r->work_types() == std::vector<std::string>{"pack.loaded", "pack.loaded", "trials.mine",
                                                      "forktrialish", "probe", "trials.mine",
                                                      "forktrialish", "runtime.idle"});
}

TEST_CASE("a candidate cannot act as the runtime, the scenario, forktrial or another pack",
          "[runtime][emit]") {
  const std::string common = attempt("{ type = 'x', actor = 'runtime' }") +
                             attempt("{ type = 'x', actor = 'forktrial.parent' }") +
                             attempt("{ type = 'x', actor = 'forktrial' }") +
                             attempt("{ type = 'x', actor = 'forktrial-child' }") +
                             attempt("{ type = 'x', actor = 'alpha/relay' }") +
                             attempt("{ type = 'x', actor = 'alpha/' }") +
                             attempt("{ type = 'x', actor = 'beta/anything' }") +
                             attempt("{ type = 'x', actor = 'trial.replay' }") +
                             attempt("{ type = 'x', actor = 'user' }") +
                             attempt("{ type = 'x', actor = 'alpha.relay' }");
  Emitters e(common + attempt("{ type = 'x', actor = 'scenario' }") +
             attempt("{ type = 'x', actor = 'system' }"));
  e.each(12, [](const std::vector<std::string>& outcomes, const std::string& call) {
    check_refused(outcomes[0], call,
                  "actor \"runtime\" is reserved: it names the runtime, which writes "
                  "pack.loaded, behavior.failed and runtime.* events");
    check_refused(outcomes[1], call,
                  "actor \"forktrial.parent\" is reserved: actors starting with \"forktrial\" "
                  "name forktrial itself");
    check_refused(outcomes[2], call, "actor \"forktrial\" is reserved");
    check_refused(outcomes[3], call, "actor \"forktrial-child\" is reserved");
    check_refused(outcomes[4], call,
                  "actor \"alpha/relay\" is reserved: an actor \"<pack>/<behavior>\" names a "
                  "behavior of pack \"alpha\", and only pack \"alpha\" may use it");
    check_refused(outcomes[5], call, "actor \"alpha/\" is reserved");
    CHECK(outcomes[6] == "accepted");
    CHECK(outcomes[7] == "accepted");
    CHECK(outcomes[8] == "accepted");
    check_refused(outcomes[9], call,
                  "actor \"alpha.relay\" is reserved: an actor \"<pack>.<behavior>\" names a "
                  "behavior of pack \"alpha\", and only pack \"alpha\" may use it");
  });
  // The scenario may name itself; a behavior may not pose as the scenario.
  CHECK(e.outcomes("scenario")[10] == "accepted");
  check_refused(e.outcomes("beta.probe")[10], "graph:emit",
                "actor \"scenario\" is reserved: it names the scenario of the trial, and "
                "only the scenario may use it");
  // Nor as the actor of the scenario's graph changes.
  CHECK(e.outcomes("scenario")[11] == "accepted");
  check_refused(e.outcomes("beta.probe")[11], "graph:emit",
                "actor \"system\" is reserved: it writes the scenario's graph changes, and "
                "only the scenario may use it");
  std::vector<std::string> actors;
  for (const auto& event : e.r->of_type("x")) actors.push_back(*event.actor);
  CHECK(actors == std::vector<std::string>{"beta/anything", "trial.replay", "user", "scenario",
                                           "system", "beta/anything", "trial.replay", "user"});
}

TEST_CASE("a behavior name that cannot be an actor fails the load", "[runtime][emit]") {
  TempDir dir;
  PackSpec spec;
  spec.behaviors = {"echo\\u001b[2J"};  // TOML escape: the manifest declares the same name
  spec.pack_lua = pack_header(spec) +
                  "pack:behavior{ name = 'echo\\27[2J', on = {'x'}, run = function() end }\n"
                  "return pack\n";
  auto r = make_runtime();
  auto loaded = r->rt->load_pack(write_pack(dir, "p", spec), PackRole::candidate);
  REQUIRE_FALSE(loaded);
  CHECK_THAT(loaded.error().message,
             Catch::Contains("pack:behavior: field \"name\" \"echo\\x1b[2J\" contains the "
                             "control character U+001B at offset 4") &&
                 Catch::Contains("a behavior's name is part of its actor"));
  CHECK(r->sunk.empty());
}

TEST_CASE("rt:run_goal refuses a goal that is not valid UTF-8, as payloads do", "[runtime][emit]") {
  TempDir dir;
  PackSpec spec;
  spec.pack_lua = pack_header(spec) + "return pack\n";
  spec.files["s.lua"] = R"(
function main(rt)
  print(select(2, pcall(rt.run_goal, rt, "caf\xE9")))
  rt:run_goal("caf\xC3\xA9")
end
)";
  auto r = make_runtime();
  load_or_fail(*r, write_pack(dir, "p", spec));
  const auto result = r->rt->run_scenario("s.lua");
  INFO(result.message);
  REQUIRE(result.outcome == Outcome::completed);
  REQUIRE(r->log.size() == 1);
  CHECK(r->log[0] == "[scenario] rt:run_goal goal: the string is not valid UTF-8");
  const auto goals = r->of_type("goal.created");
  REQUIRE(goals.size() == 1);
  CHECK(payload_of(goals[0])["goal"] == "caf\xC3\xA9");
}
