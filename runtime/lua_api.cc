#include "runtime/lua_api.h"

#include "runtime/lua_globals.h"
#include "runtime/lua_graph.h"
#include "runtime/lua_pack.h"
#include "runtime/lua_rt.h"

namespace forktrial::runtime {

void install_pack_api(lua_State* L, PackHost& host) {
  install_forktrial(L, host);
  install_require(L, host);
  install_print(L, host);
  register_graph_type(L);
  register_rt_type(L);
}

}  // namespace forktrial::runtime
