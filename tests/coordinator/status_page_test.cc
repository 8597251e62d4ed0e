#include "coordinator/status_page.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <regex>
#include <set>
#include <string>

namespace forktrial::coordinator {
namespace {

using nlohmann::ordered_json;

bool has_header(const transport::HttpResponse& response, const std::string& name,
                const std::string& value) {
  return std::any_of(response.headers.begin(), response.headers.end(), [&](const auto& header) {
    return header == std::pair{name, value};
  });
}

TEST_CASE("the API's JSON carries HTML-significant characters escaped, and reads back the same",
          "[coordinator][status]") {
  const ordered_json doc{{"candidate", "<img src=x onerror=alert(1)>"},
                         {"detail", "a & b </script>"},
                         {"bytes", std::string("bad \xff end")}};
  const auto response = status_json_response(404, doc);
  CHECK(response.status == 404);
  CHECK(response.content_type == "application/json");
  CHECK(has_header(response, "Content-Security-Policy", std::string(kStatusPagePolicy)));
  CHECK(response.body.find_first_of("<>&") == std::string::npos);
  CHECK(response.body.find(R"(\u003cimg src=x onerror=alert(1)\u003e)") != std::string::npos);
  const auto back = ordered_json::parse(response.body);
  CHECK(back["candidate"] == doc["candidate"]);
  CHECK(back["detail"] == doc["detail"]);
  // Bytes that are not UTF-8 are repaired, not refused.
  CHECK(back["bytes"] == "bad \xef\xbf\xbd end");
}

TEST_CASE("the page's files are served under the policy, and name no file it lacks",
          "[coordinator][status]") {
  transport::LoopHandoff api;
  const auto routes = status_page_routes(api);
  std::set<std::string> paths;
  for (const auto& [path, handler] : routes) paths.insert(path);
  for (const auto path : kStatusApiPaths) CHECK(paths.contains(std::string(path)));
  const std::pair<std::string, std::string> pages[] = {
      {"/", "text/html; charset=utf-8"},
      {"/status.css", "text/css; charset=utf-8"},
      {"/status.js", "text/javascript; charset=utf-8"},
      {"/favicon.svg", "image/svg+xml"}};
  for (const auto& [path, type] : pages) {
    INFO(path);
    const auto route =
        std::find_if(routes.begin(), routes.end(), [&](const auto& r) { return r.first == path; });
    REQUIRE(route != routes.end());
    const auto response = route->second(transport::HttpRequest{"GET", path, ""});
    CHECK(response.status == 200);
    CHECK(response.content_type == type);
    CHECK_FALSE(response.body.empty());
    CHECK(has_header(response, "Content-Security-Policy", std::string(kStatusPagePolicy)));
  }
  CHECK(std::string(kStatusPagePolicy).starts_with("default-src 'self';"));
  // Every file the page names is one the coordinator serves, by a relative
  // path (nothing from elsewhere).
  const auto index =
      std::find_if(routes.begin(), routes.end(), [](const auto& r) { return r.first == "/"; });
  const std::string html = index->second(transport::HttpRequest{"GET", "/", ""}).body;
  const std::regex reference(R"((?:src|href)="([^"]*)\")");
  int named = 0;
  for (auto it = std::sregex_iterator(html.begin(), html.end(), reference);
       it != std::sregex_iterator(); ++it) {
    INFO((*it)[1].str());
    CHECK(paths.contains("/" + (*it)[1].str()));
    ++named;
  }
  CHECK(named == 3);
}

}  // namespace
}  // namespace forktrial::coordinator
