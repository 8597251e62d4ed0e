#include "base/memory.h"

#include <malloc.h>

#include <cstddef>

// jemalloc's control interface, present only when the program links
// jemalloc: a weak reference is null otherwise.
extern "C" int mallctl(const char* name, void* oldp, std::size_t* oldlenp, void* newp,
                       std::size_t newlen) __attribute__((weak));

namespace forktrial {

void give_back_freed_memory() {
  if (mallctl != nullptr) {
    // MALLCTL_ARENAS_ALL is 4096: every arena's unused dirty pages.
    mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
    return;
  }
  ::malloc_trim(0);
}

}  // namespace forktrial
