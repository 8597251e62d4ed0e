#include "coordinator/status_page.h"

#include <string>

namespace forktrial::coordinator {
namespace {

std::string_view content_type_of(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".svg")) return "image/svg+xml";
  return "application/octet-stream";
}

void add_policy(transport::HttpResponse& response) {
  response.headers.emplace_back("Content-Security-Policy", std::string(kStatusPagePolicy));
  response.headers.emplace_back("Referrer-Policy", "no-referrer");
}

}  // namespace

transport::HttpResponse status_json_response(int status, const nlohmann::ordered_json& doc) {
  const std::string text = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  transport::HttpResponse response;
  response.status = status;
  response.content_type = "application/json";
  response.body.reserve(text.size() + text.size() / 16);
  // Outside strings JSON has none of these characters: escaping them all
  // changes no value.
  for (const char c : text) {
    switch (c) {
      case '<':
        response.body += "\\u003c";
        break;
      case '>':
        response.body += "\\u003e";
        break;
      case '&':
        response.body += "\\u0026";
        break;
      default:
        response.body += c;
    }
  }
  response.body += '\n';
  add_policy(response);
  return response;
}

transport::HttpServer::Routes status_page_routes(transport::LoopHandoff& api) {
  transport::HttpServer::Routes routes;
  for (const auto& [name, bytes] : status_page_files()) {
    const std::string path = name == "index.html" ? "/" : "/" + std::string(name);
    routes.emplace_back(path, [name, bytes](const transport::HttpRequest&) {
      transport::HttpResponse response;
      response.content_type = std::string(content_type_of(name));
      response.body = std::string(bytes);
      add_policy(response);
      return response;
    });
  }
  for (const std::string_view path : kStatusApiPaths) {
    routes.emplace_back(std::string(path), api.handler());
  }
  return routes;
}

}  // namespace forktrial::coordinator
