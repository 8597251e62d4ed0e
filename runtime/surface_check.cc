#include "runtime/surface_check.h"

#include <algorithm>

namespace forktrial::runtime {
namespace {

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

void compare_lists(std::string_view kind, std::string_view field,
                   const std::vector<std::string>& declared,
                   const std::vector<std::string>& registered, std::string_view code_label,
                   std::vector<std::string>& out) {
  const std::string where = "manifest.toml [surface]." + std::string(field);
  for (const auto& item : registered) {
    if (!contains(declared, item)) {
      out.push_back(std::string(kind) + " \"" + item + "\" is registered by " +
                    std::string(code_label) + " but missing from " + where);
    }
  }
  for (const auto& item : declared) {
    if (!contains(registered, item)) {
      out.push_back(std::string(kind) + " \"" + item + "\" is declared in " + where +
                    " but not registered by " + std::string(code_label));
    }
  }
}

const pack::Capability* find_capability(const std::vector<pack::Capability>& list,
                                        const std::string& id) {
  const auto it = std::find_if(list.begin(), list.end(),
                               [&](const pack::Capability& c) { return c.id() == id; });
  return it == list.end() ? nullptr : &*it;
}

std::vector<std::string> capability_ids(const std::vector<pack::Capability>& list) {
  std::vector<std::string> ids;
  for (const auto& capability : list) ids.push_back(capability.id());
  return ids;
}

// One attribute of a capability declared on both sides, which must agree.
void compare_attribute(const std::string& id, std::string_view attribute,
                       const std::string& declared, const std::string& actual,
                       std::string_view code_label, std::vector<std::string>& out) {
  if (declared == actual) return;
  out.push_back("capability \"" + id + "\" has " + std::string(attribute) + " \"" + declared +
                "\" in manifest.toml but \"" + actual + "\" in " + std::string(code_label));
}

}  // namespace

std::vector<std::string> compare_surfaces(const pack::Surface& manifest,
                                          const pack::Surface& registered,
                                          std::string_view code_label) {
  std::vector<std::string> out;
  compare_lists("object type", "object_types", manifest.object_types, registered.object_types,
                code_label, out);
  compare_lists("relation type", "relation_types", manifest.relation_types,
                registered.relation_types, code_label, out);
  compare_lists("behavior", "behaviors", manifest.behaviors, registered.behaviors, code_label, out);
  compare_lists("tool", "tools", manifest.tools, registered.tools, code_label, out);
  compare_lists("capability", "capabilities", capability_ids(manifest.capabilities),
                capability_ids(registered.capabilities), code_label, out);
  for (const auto& declared : manifest.capabilities) {
    const pack::Capability* actual = find_capability(registered.capabilities, declared.id());
    if (actual == nullptr) continue;
    compare_attribute(declared.id(), "risk_class", declared.risk_class, actual->risk_class,
                      code_label, out);
    compare_attribute(declared.id(), "action_class", declared.action_class, actual->action_class,
                      code_label, out);
    compare_attribute(declared.id(), "credential_ref", declared.credential_ref,
                      actual->credential_ref, code_label, out);
  }
  if (manifest.settings_schema != registered.settings_schema) {
    out.push_back("settings_schema is \"" + manifest.settings_schema +
                  "\" in manifest.toml but \"" + registered.settings_schema + "\" in " +
                  std::string(code_label));
  }
  return out;
}

}  // namespace forktrial::runtime
