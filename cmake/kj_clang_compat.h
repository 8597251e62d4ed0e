// Included before every C++ source by clang 16 and later (CMakeLists.txt).
//
// Cap'n Proto before 1.0 compares `const char*` with kj::StringPtr and
// kj::String in its own headers (capnp/blob.h) relying on C++20 to reverse
// the members StringPtr::operator==(const StringPtr&): it leaves out its
// free operators when the compiler has three-way comparison. Since P2468
// (clang 16; GCC 13) a member operator== that has a matching operator!=, as
// these do, is no longer reversed, so those comparisons no longer compile.
// The free operators kj declares without three-way comparison are declared
// here, as exact matches that take precedence over any rewritten candidate.
#pragma once

#if defined(__clang__) && __has_include(<capnp/common.h>)
#include <capnp/common.h>
#if CAPNP_VERSION < 1000000
#include <kj/string.h>

namespace kj {
#if __cpp_impl_three_way_comparison
inline bool operator==(const char* a, const StringPtr& b) {
  return b == StringPtr(a);
}
inline bool operator!=(const char* a, const StringPtr& b) {
  return !(b == StringPtr(a));
}
inline bool operator==(const char* a, const String& b) {
  return b == StringPtr(a);
}
inline bool operator!=(const char* a, const String& b) {
  return !(b == StringPtr(a));
}
#endif
}  // namespace kj
#endif
#endif
