#pragma once

namespace forktrial {

// Hands the memory a process freed back to the system now, rather than
// keeping it as its high water: after a large message, its parse and its
// records are freed. Works with glibc's allocator and with jemalloc (which
// the `forktrial` command links by default); a no-op elsewhere.
void give_back_freed_memory();

}  // namespace forktrial
