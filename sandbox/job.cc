#include "sandbox/job.h"

#include <nlohmann/json.hpp>

namespace forktrial::sandbox {

using nlohmann::json;

namespace {

std::string invalid(const std::string& what, const std::vector<std::string>& problems) {
  std::string message = "the job's " + what + " failed validation:";
  for (const auto& problem : problems) message += "\n  " + problem;
  return message;
}

}  // namespace

store::StoreOptions scratch_store_options() {
  store::StoreOptions options;
  options.sync = false;
  options.initial_map_size = std::size_t{32} << 20;
  // The worker (or parent) and the child use it one after the other.
  options.max_readers = 16;
  return options;
}

std::string encode_job(const ChildJob& job) {
  json out{{"preflight", job.preflight}, {"fork_run_id", job.fork_run_id},
           {"fork_seq", job.fork_seq},   {"scratch_store", job.scratch_store},
           {"trial_id", job.trial_id},   {"parent_pid", job.parent_pid},
           {"strict", job.strict},       {"strict_root", job.strict_root}};
  if (!job.exec_argv.empty()) {
    out["exec"] = json{{"argv", job.exec_argv},
                       {"env", job.exec_env},
                       {"stdin", job.exec_stdin},
                       {"read_only", job.exec_read_only}};
  }
  // The limits and the specification go in as their canonical texts, which
  // are JSON already: parsing them only to print them again was a tenth of
  // the CPU a worker spends on a trivial trial outside its child.
  std::string text = out.dump();  // "{...}", never empty
  text.replace(0, 1,
               "{\"limits\":" + to_canonical_json(job.limits) + ",\"specification\":" +
                   (job.spec ? to_canonical_json(*job.spec) : std::string("null")) + ",");
  return text;
}

std::expected<ChildJob, Status> decode_job(std::string_view text) {
  json doc = json::parse(text.begin(), text.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return failure(ErrorCode::invalid_argument,
                   std::string("the job on stdin is not a JSON object"));
  }
  try {
    ChildJob job;
    job.preflight = doc.at("preflight").get<bool>();
    auto limits = parse_trial_limits(doc.at("limits").dump());
    if (!limits)
      return failure(ErrorCode::invalid_argument, invalid("limits", limits.error().list));
    job.limits = *limits;
    if (!doc.at("specification").is_null()) {
      auto spec = parse_trial_specification(doc.at("specification").dump());
      if (!spec)
        return failure(ErrorCode::invalid_argument,
                       invalid("trial specification", spec.error().list));
      job.spec = *spec;
    }
    job.fork_run_id = doc.at("fork_run_id").get<std::string>();
    job.fork_seq = doc.at("fork_seq").get<std::uint64_t>();
    job.scratch_store = doc.at("scratch_store").get<std::string>();
    job.trial_id = doc.at("trial_id").get<std::string>();
    job.parent_pid = doc.at("parent_pid").get<int>();
    job.strict = doc.at("strict").get<bool>();
    job.strict_root = doc.at("strict_root").get<std::string>();
    if (const auto exec = doc.find("exec"); exec != doc.end()) {
      job.exec_argv = exec->at("argv").get<std::vector<std::string>>();
      job.exec_env = exec->at("env").get<std::vector<std::string>>();
      job.exec_stdin = exec->at("stdin").get<std::string>();
      job.exec_read_only = exec->at("read_only").get<std::vector<std::string>>();
      if (job.exec_argv.empty()) {
        return failure(ErrorCode::invalid_argument, std::string("the job's exec has no program"));
      }
    }
    return job;
  } catch (const json::exception& e) {
    return failure(ErrorCode::invalid_argument,
                   "the job on stdin is malformed: " + std::string(e.what()));
  }
}

}  // namespace forktrial::sandbox
