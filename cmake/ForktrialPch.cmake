# Quicker compiles, two ways; docs/decisions/0074-test-suite-passes.md says what
# each saves.
#
# Unity builds (FORKTRIAL_UNITY, on in the presets scripts/demo and
# scripts/test build): each library's and command's sources are compiled a few
# at a time as one source (CMake's UNITY_BUILD, FORKTRIAL_UNITY_BATCH files
# each), so the heavy headers they all include (Cap'n Proto, nlohmann-json,
# spdlog, CLI11, the standard library) are parsed once per batch, not once per
# file. The tests are not: each test file stays its own compile, as ctest and
# a failing test's file name expect. Off by default, for an incremental
# build where a change recompiles one file, not its batch.
#
# Precompiled headers: the heavy headers nearly every source includes (the
# standard library, nlohmann-json, and Catch2 for the tests) are parsed once
# per build, not once per source file.
#
# Two targets build them, one for the libraries and commands (in builds other
# than Release) and one for the tests, with forktrial's flags; every other target reuses one of the two
# (REUSE_FROM), so a build compiles two headers, not one per target. GCC and
# clang: GCC does not use a header it finds built with other options, which
# costs time, never correctness; clang refuses one whose options conflict,
# and the targets that reuse one share its flags. FORKTRIAL_PCH=OFF builds
# without them.
include_guard(GLOBAL)

if(CMAKE_CXX_COMPILER_ID MATCHES "^(GNU|Clang)$")
  set(forktrial_pch_default ON)
else()
  set(forktrial_pch_default OFF)
endif()
option(FORKTRIAL_PCH "Precompile the headers most sources include (GCC, clang)" ${forktrial_pch_default})
option(FORKTRIAL_UNITY "Compile each library's and command's sources a few at a time as one" OFF)
set(FORKTRIAL_UNITY_BATCH 4 CACHE STRING "Sources per unity compile (FORKTRIAL_UNITY)")
if(FORKTRIAL_UNITY AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  # In a unity compile a .cc file is no longer the main file, and GCC warns
  # that a class with a member of an anonymous-namespace type has internal
  # linkage by another file: true and harmless, as the class lives in that
  # compile alone.
  target_compile_options(forktrial_flags INTERFACE -Wno-subobject-linkage)
endif()

# Through a precompiled header GCC 12 no longer treats the standard library's
# code inlined into ours as a system header's, and reports its std::string
# copies as out of bounds or overlapping (GCC bugs 105329 and 105651) where
# it is silent when the same headers are included directly. Targets that use
# one are compiled without those warnings (and -Wstringop-overread, of the same family). In the Release pass (-O3,
# -Werror) forktrial's libraries and commands use none, so its own code is
# still compiled once with every warning; only the tests use one there.
# They follow forktrial's own warning flags, which would turn them back on.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_compile_options(forktrial_flags INTERFACE
    "$<$<BOOL:$<TARGET_PROPERTY:FORKTRIAL_USES_PCH>>:-Wno-array-bounds;-Wno-stringop-overflow;-Wno-stringop-overread;-Wno-restrict>")
endif()

# The tests' own code is compiled at -O0 whatever the build type: it needs to
# be quick to build, not fast (a Catch2 test file takes half the time at -O0
# that it takes at -O1 or -O3), and the code under test keeps the build's
# flags. A precompiled header then also saves a larger share.
set(FORKTRIAL_TEST_OPTIMIZATION $<$<NOT:$<CONFIG:Debug>>:-O0>)

if(FORKTRIAL_PCH AND NOT CMAKE_BUILD_TYPE STREQUAL "Release")
  set(forktrial_pch_for_code ON)
endif()
if(FORKTRIAL_PCH)
  # ccache caches a compile that uses a precompiled header only with this
  # (and scripts/build's CCACHE_SLOPPINESS); the compile itself is the same.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(forktrial_flags INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fpch-preprocess>)
  else()
    # clang writes the header's build time into it unless told not to.
    target_compile_options(forktrial_flags INTERFACE
                           "$<$<COMPILE_LANGUAGE:CXX>:SHELL:-Xclang -fno-pch-timestamp>")
  endif()
  file(WRITE ${PROJECT_BINARY_DIR}/pch/empty.cc "// what the precompiled headers are built for\n")
endif()
if(forktrial_pch_for_code)
  add_library(forktrial_pch OBJECT ${PROJECT_BINARY_DIR}/pch/empty.cc)
  target_link_libraries(forktrial_pch PRIVATE forktrial::flags nlohmann_json::nlohmann_json)
  set_property(TARGET forktrial_pch PROPERTY FORKTRIAL_USES_PCH ON)
  target_precompile_headers(forktrial_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch/forktrial.h)
endif()

# forktrial_quick_compile(TARGET): TARGET, a library or command of forktrial's
# own code, is compiled in unity batches (with FORKTRIAL_UNITY) and its C++
# sources start from the precompiled header of forktrial's code (not in
# Release builds, above).
function(forktrial_quick_compile target)
  if(FORKTRIAL_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${FORKTRIAL_UNITY_BATCH})
  endif()
  if(forktrial_pch_for_code)
    set_property(TARGET ${target} PROPERTY FORKTRIAL_USES_PCH ON)
    target_precompile_headers(${target} REUSE_FROM forktrial_pch)
  endif()
endfunction()

# forktrial_use_test_pch(TARGET): TARGET, a test, starts from the tests' one,
# built on first use (Catch2 is found by then).
function(forktrial_use_test_pch target)
  target_compile_options(${target} PRIVATE ${FORKTRIAL_TEST_OPTIMIZATION})
  if(NOT FORKTRIAL_PCH)
    return()
  endif()
  if(NOT TARGET forktrial_test_pch)
    add_library(forktrial_test_pch OBJECT ${PROJECT_BINARY_DIR}/pch/empty.cc)
    target_link_libraries(forktrial_test_pch PRIVATE forktrial::flags nlohmann_json::nlohmann_json
                                                     Catch2::Catch2)
    target_compile_options(forktrial_test_pch PRIVATE ${FORKTRIAL_TEST_OPTIMIZATION})
    set_property(TARGET forktrial_test_pch PROPERTY FORKTRIAL_USES_PCH ON)
    target_precompile_headers(forktrial_test_pch PRIVATE
                              ${PROJECT_SOURCE_DIR}/cmake/pch/forktrial_tests.h)
  endif()
  set_property(TARGET ${target} PROPERTY FORKTRIAL_USES_PCH ON)
  target_precompile_headers(${target} REUSE_FROM forktrial_test_pch)
endfunction()
