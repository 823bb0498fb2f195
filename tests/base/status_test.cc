// base/status.h: Status and Result<T> carry a code, a message id and a message; a Result is a
// value or a failure, and asking a failure for its value (or building a "failure" that is a
// success) is a bug of the caller: TIERCE_CHECK aborts.
#define BOOST_TEST_MODULE base_status
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <memory>
#include <string>

#include "base/status.h"
#include "tests/support/process.h"

using tierce::base::Code;
using tierce::base::Result;
using tierce::base::Status;

using tierce_test::in_child;

namespace {
Result<int> parse_port(const std::string& s) {
  if (s.empty() || s.size() > 5 || s.find_first_not_of("0123456789") != std::string::npos)
    return Status(Code::InvalidArgument, "port '" + s + "' is not a number", "FTPD9999");
  int v = std::stoi(s);
  if (v == 0 || v > 65535) return {Code::InvalidArgument, "port " + s + " is out of range"};
  return v;
}
}  // namespace

BOOST_AUTO_TEST_CASE(a_default_status_is_success) {
  Status s;
  BOOST_TEST(s.ok());
  BOOST_TEST(s.code() == Code::Ok);
  BOOST_TEST(s.to_string() == "ok");
  BOOST_TEST(s.msgid().empty());
}

BOOST_AUTO_TEST_CASE(a_failure_says_its_code_id_and_message) {
  Status s(Code::NotFound, "no account 'tierce'", "MEMD0031");
  BOOST_TEST(!s.ok());
  BOOST_TEST(s.code() == Code::NotFound);
  BOOST_TEST(s.msgid() == "MEMD0031");
  BOOST_TEST(s.message() == "no account 'tierce'");
  BOOST_TEST(s.to_string() == "MEMD0031 no account 'tierce'");
  BOOST_TEST(Status(Code::Internal, "x").to_string() == "x");  // no id: the message alone
  BOOST_TEST(tierce::base::to_string(Code::DeadlineExceeded) == "deadline exceeded");
}

BOOST_AUTO_TEST_CASE(a_result_holds_a_value_or_the_failure) {
  auto good = parse_port("8021");
  BOOST_REQUIRE(good.ok());
  BOOST_TEST(*good == 8021);
  BOOST_TEST(good.status().ok());
  BOOST_TEST(good.message().empty());

  auto bad = parse_port("80x");
  BOOST_TEST(!bad.ok());
  BOOST_TEST(!bad);
  BOOST_TEST(bad.status().code() == Code::InvalidArgument);
  BOOST_TEST(bad.status().msgid() == "FTPD9999");
  BOOST_TEST(bad.message() == "port '80x' is not a number");

  auto range = parse_port("70000");
  BOOST_TEST(range.message() == "port 70000 is out of range");
  BOOST_TEST(range.status().msgid().empty());
}

BOOST_AUTO_TEST_CASE(a_result_moves_its_value_out) {
  Result<std::unique_ptr<int>> r(std::make_unique<int>(7));
  std::unique_ptr<int> p = std::move(r).value();
  BOOST_REQUIRE(p);
  BOOST_TEST(*p == 7);
}

BOOST_AUTO_TEST_CASE(the_value_of_a_failure_is_a_bug_and_aborts) {
  auto [status, err] = in_child([] {
    Result<int> r(Code::Unavailable, "home down");
    volatile int v = r.value();
    (void)v;
  });
  BOOST_TEST(WIFSIGNALED(status));
  BOOST_TEST(WTERMSIG(status) == SIGABRT);
  BOOST_TEST(err.find("value() of a Result that holds a failure") != std::string::npos, err);
}

BOOST_AUTO_TEST_CASE(a_failure_status_with_the_ok_code_is_a_bug_and_aborts) {
  auto [status, err] = in_child([] { Status s(Code::Ok, "fine?"); (void)s; });
  BOOST_TEST(WIFSIGNALED(status));
  BOOST_TEST(err.find("a failure Status has a failure code") != std::string::npos, err);
}
