// The arguments and errors of the runtime's Lua API functions (internal to
// the runtime): reading and checking arguments and spec tables, raising
// errors that point at the calling Lua code, and pushing strings.
//
// Every function here uses the Lua stack of `L` and can raise a Lua error
// (which unwinds as a C++ exception in lua5.4-c++); call them only from
// lua_CFunctions registered through cxx_boundary (runtime/lua_host.h). `what`
// names the call for messages ("graph:emit", "forktrial.pack"). Not
// thread-safe, like the state they work on.
#pragma once

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

struct lua_State;

namespace forktrial::runtime {

struct PackHost;

// Raises `message`, prefixed with the calling Lua code's position.
[[noreturn]] void raise(lua_State* L, const std::string& message);

// The pack a closure was made for: its first upvalue, a light userdata.
PackHost& host_upvalue(lua_State* L);

// The string (or number, converted in place) at `index`, bytes as they are.
std::string string_at(lua_State* L, int index);

// Raises unless the value at `index` is a table: "<what> expects a table".
void require_table(lua_State* L, int index, const std::string& what);

// Raises naming the first unknown key (in sorted order) if the table at
// `table` has keys other than `allowed`, so a typo is an error rather than a
// silently ignored field.
void check_keys(lua_State* L, int table, std::initializer_list<const char*> allowed,
                const std::string& what);

// The string field `key` of the table at `table`; nullopt when absent.
// Raises when it is not a string, and when `required` and it is absent or
// empty.
std::optional<std::string> string_field(lua_State* L, int table, const char* key,
                                        const std::string& what, bool required);

// The table argument at `index` converted to a JSON object ({} for none or
// nil). Raises when it is not a table, when the conversion fails
// (runtime/lua_json.h; past its limits that is memory that ran out) and when
// the table is a list.
nlohmann::ordered_json object_argument(lua_State* L, int index, const std::string& what);

// Raises unless `value`, the event text field `field`, is plain text of at
// most `limit` bytes: the store's rule (store/event.h), checked here so that
// the candidate gets a Lua error instead of a trial stopped by the store.
// `why` is appended to the message.
void require_event_text(lua_State* L, const std::string& what, std::string_view field,
                        std::string_view value, std::size_t limit, std::string_view why = {});

void push_string(lua_State* L, const std::string& text);
// table[key] = value, for the table at absolute index `table`.
void set_string(lua_State* L, int table, const char* key, const std::string& value);

}  // namespace forktrial::runtime
