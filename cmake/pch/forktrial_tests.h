// The precompiled header of the tests (cmake/ForktrialPch.cmake): forktrial's,
// and Catch2's single header, which every test includes. The tests' main
// (tests/test_main.cc) compiles Catch2's implementation and is built without it.
#pragma once

#include "forktrial.h"

#include <catch2/catch.hpp>
