// base/check.h: TIERCE_CHECK aborts with the place, the condition and what must hold; it does
// nothing when the condition holds; TIERCE_DCHECK checks in debug builds only and does not even
// evaluate its condition in release builds.
#define BOOST_TEST_MODULE base_check
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

#include "base/check.h"
#include "tests/support/process.h"

using tierce_test::in_child;

BOOST_AUTO_TEST_CASE(a_failed_check_aborts_saying_where_and_what) {
  auto [status, err] = in_child([] {
    int slabs = 2;
    TIERCE_CHECK(slabs == 0, "an owner retires holding no slab");
  });
  BOOST_TEST(WIFSIGNALED(status));
  BOOST_TEST((WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT));
  BOOST_TEST(err.find("TIERCE CHECK failed at ") != std::string::npos, err);
  BOOST_TEST(err.find("check_test.cc:") != std::string::npos, err);
  BOOST_TEST(err.find("slabs == 0 (an owner retires holding no slab)") != std::string::npos, err);
}

BOOST_AUTO_TEST_CASE(a_check_that_holds_does_nothing) {
  auto [status, err] = in_child([] { TIERCE_CHECK(1 + 1 == 2, "arithmetic"); });
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0);
  BOOST_TEST(err.empty(), err);
}

BOOST_AUTO_TEST_CASE(a_debug_check_is_on_in_debug_builds_only) {
  int evaluated = 0;
  TIERCE_DCHECK(++evaluated > 0, "counts its evaluations");
  auto [status, err] = in_child([] { TIERCE_DCHECK(false, "debug only"); });
#ifdef NDEBUG
  BOOST_TEST(evaluated == 0);  // not even evaluated
  BOOST_TEST(WIFEXITED(status));
  BOOST_TEST(err.empty(), err);
#else
  BOOST_TEST(evaluated == 1);
  BOOST_TEST((WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT));
  BOOST_TEST(err.find("false (debug only)") != std::string::npos, err);
#endif
}
