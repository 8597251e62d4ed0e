// The coordinator's status page and its JSON API, as routes of its HTTP
// server (docs/cluster.md, "Status page and JSON API"):
//
//   /, /status.css, /status.js, the page: files of coordinator/status_page/
//   /favicon.svg                compiled into the binary, served from memory
//                               by the HTTP threads; the page fetches the
//                               JSON below every second
//   /api/jobs, /api/job?id=J, /api/candidates?job=J, /api/workers,
//   /api/failures[?job=J]       JSON built by the coordinator's loop thread
//                               from its own state, reached through a
//                               transport::LoopHandoff (coordinator/server_status.cc
//                               answers them)
//
// Every answer carries a Content-Security-Policy of `default-src 'self'`:
// the page runs its own script and style only and fetches nothing from
// anywhere else. The JSON writes '<', '>' and '&' as \u escapes, so a name
// a candidate chose stays inert even where JSON is mistaken for HTML.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>
#include <vector>

#include "transport/http_server.h"
#include "transport/loop_handoff.h"

namespace forktrial::coordinator {

inline constexpr std::string_view kStatusPagePolicy =
    "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// The API's paths, each answered by the loop thread.
inline constexpr std::array<std::string_view, 5> kStatusApiPaths = {
    "/api/jobs", "/api/job", "/api/candidates", "/api/workers", "/api/failures"};

// The routes of the page and the API; the API's through `api`, which must
// outlive the server serving them.
transport::HttpServer::Routes status_page_routes(transport::LoopHandoff& api);

// `doc` as the API answers it: application/json, with the page's policy.
// Text that is not UTF-8 is repaired (U+FFFD), never refused.
transport::HttpResponse status_json_response(int status, const nlohmann::ordered_json& doc);

// The files of coordinator/status_page/ as the build embedded them: (name,
// bytes), e.g. ("index.html", "<!doctype html>..."). Generated at build time
// (cmake/EmbedFiles.cmake); static, valid for the life of the process.
const std::vector<std::pair<std::string_view, std::string_view>>& status_page_files();

}  // namespace forktrial::coordinator
