#include "coordinator/candidate_ranking.h"

#include <algorithm>
#include <array>
#include <tuple>

namespace forktrial::coordinator {
namespace {

// The statuses of a trial without a verdict: not yet (queued, leased,
// reported) or never (cancelled).
constexpr std::array<std::string_view, 4> kWithoutVerdict = {"queued", "leased", "reported",
                                                             "cancelled"};

}  // namespace

std::uint64_t CandidateRank::finished() const {
  std::uint64_t pending = 0;
  for (const std::string_view status : kWithoutVerdict) {
    const auto found = outcomes.find(std::string(status));
    if (found != outcomes.end()) pending += found->second;
  }
  return trials - std::min(pending, trials);
}

double CandidateRank::completed_share() const {
  const auto completed = outcomes.find("completed");
  const std::uint64_t verdicts = finished();
  if (verdicts == 0 || completed == outcomes.end()) return 0.0;
  return static_cast<double>(completed->second) / static_cast<double>(verdicts);
}

void CandidateTally::add(std::string_view candidate, std::string_view outcome_or_status) {
  auto row = rows_.find(candidate);
  if (row == rows_.end()) {
    row = rows_.emplace(std::string(candidate), CandidateRank{std::string(candidate), 0, {}}).first;
  }
  ++row->second.trials;
  auto outcome = row->second.outcomes.find(std::string(outcome_or_status));
  if (outcome == row->second.outcomes.end()) {
    row->second.outcomes.emplace(std::string(outcome_or_status), 1);
  } else {
    ++outcome->second;
  }
}

void CandidateTally::add_result(const nlohmann::ordered_json& result) {
  const auto& outcome = result.at("outcome");
  add(result.at("candidate").get_ref<const std::string&>(),
      outcome.is_string() ? outcome.get_ref<const std::string&>()
                          : result.at("status").get_ref<const std::string&>());
}

std::vector<CandidateRank> CandidateTally::ranked() const {
  std::vector<CandidateRank> out;
  out.reserve(rows_.size());
  for (const auto& [name, row] : rows_) out.push_back(row);
  // Stable: candidates of one share and as many finished trials stay in the
  // order of their names.
  std::stable_sort(out.begin(), out.end(), [](const CandidateRank& a, const CandidateRank& b) {
    return std::tuple(a.completed_share(), a.finished()) >
           std::tuple(b.completed_share(), b.finished());
  });
  return out;
}

nlohmann::ordered_json candidate_rank_json(const CandidateRank& rank) {
  return nlohmann::ordered_json{{"candidate", rank.candidate},
                                {"trials", rank.trials},
                                {"finished", rank.finished()},
                                {"completed_share", rank.completed_share()},
                                {"outcomes", rank.outcomes}};
}

}  // namespace forktrial::coordinator
