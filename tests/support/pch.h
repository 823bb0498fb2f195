// tests/support/pch.h — the precompiled header of the Boost.Test executables (tests/CMakeLists.txt,
// TIERCE_TEST_PCH): Boost.Test's heavy, configuration-independent headers and the standard headers
// most tests use. Parsing them took ~1 s of each test file's ~3.5 s under the sanitizer build.
//
// Not boost/test/unit_test.hpp itself: what it generates (init_unit_test, main) depends on
// BOOST_TEST_MODULE, which a test file defines before it includes it. Boost's config header, which
// is in here, turns BOOST_TEST_MODULE into BOOST_TEST_MAIN only when it is included after that
// define, so every test file that defines BOOST_TEST_MODULE defines BOOST_TEST_MAIN too.
#pragma once

#include <boost/test/framework.hpp>
#include <boost/test/tools/assertion.hpp>
#include <boost/test/tools/old/interface.hpp>
#include <boost/test/tree/test_unit.hpp>
#include <boost/test/unit_test_log.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>
