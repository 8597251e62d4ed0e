// The candidates of a job ranked by how their trials ended: what
// `forktrial results JOB --by candidate` prints and the coordinator's
// /api/candidates serves. Each trial counts once for its candidate, under its
// outcome when it was reconciled ("completed", "crashed", ...) and under its
// status otherwise ("queued", "abandoned", ...).
//
// Candidates rank by quality, not progress: by the share of their finished
// trials that completed, highest first; among equal shares the one with more
// finished trials first (more evidence), then by name. A finished trial has a
// verdict: reconciled with an outcome, or abandoned after its last attempt.
// Queued, leased and reported trials have none yet, and a cancelled trial
// never will, so none of them count for or against a candidate.
//
// Plain values: a CandidateTally has one owner; its results are copies.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace forktrial::coordinator {

struct CandidateRank {
  std::string candidate;
  std::uint64_t trials = 0;
  std::map<std::string, std::uint64_t> outcomes;  // outcome or status -> trials

  // Its trials with a verdict: all but the queued, leased, reported and
  // cancelled ones. `finished` over `trials` is its progress.
  std::uint64_t finished() const;
  // Completed trials over its finished trials; 0 while none has finished.
  double completed_share() const;
};

class CandidateTally {
 public:
  // One trial of `candidate`, ended as `outcome_or_status`.
  void add(std::string_view candidate, std::string_view outcome_or_status);
  // One trial of a result line ({"candidate", "outcome", "status", ...}, as
  // `forktrial results --json` prints it). Throws nlohmann::json::exception
  // when the line lacks those fields.
  void add_result(const nlohmann::ordered_json& result);

  std::vector<CandidateRank> ranked() const;

 private:
  std::map<std::string, CandidateRank, std::less<>> rows_;
};

// {"candidate", "trials", "finished", "completed_share", "outcomes": {name:
// count}}: one line of `results --by candidate --json`.
nlohmann::ordered_json candidate_rank_json(const CandidateRank& rank);

}  // namespace forktrial::coordinator
