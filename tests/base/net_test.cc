// tests/base/net_test.cc — base::address_group, the unit of the per-address connection limits.
#define BOOST_TEST_MODULE base_net
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include "base/net.h"

using tierce::base::address_group;

BOOST_AUTO_TEST_CASE(ipv4_is_counted_by_address) {
  BOOST_TEST(address_group("127.0.0.1") == "127.0.0.1");
  BOOST_TEST(address_group("10.1.2.3") != address_group("10.1.2.4"));
}

// Issue 32: one holder of a /64 must not get the limit once per address of it.
BOOST_AUTO_TEST_CASE(ipv6_is_counted_by_its_64_prefix) {
  BOOST_TEST(address_group("2001:db8:1:2::1") == "2001:db8:1:2::/64");
  BOOST_TEST(address_group("2001:db8:1:2:ffff:ffff:ffff:ffff") == "2001:db8:1:2::/64");
  BOOST_TEST(address_group("[2001:db8:1:2::9]") == "2001:db8:1:2::/64");
  BOOST_TEST(address_group("2001:db8:1:3::1") != address_group("2001:db8:1:2::1"));
  BOOST_TEST(address_group("::1") == "::/64");
  BOOST_TEST(address_group("fe80::1%eth0") == "fe80::/64");
}

BOOST_AUTO_TEST_CASE(ipv4_mapped_is_the_ipv4_address) {
  BOOST_TEST(address_group("::ffff:192.0.2.7") == "192.0.2.7");
}

BOOST_AUTO_TEST_CASE(other_names_are_kept) {
  BOOST_TEST(address_group("localhost") == "localhost");
  BOOST_TEST(address_group("/run/tierce/memd.sock") == "/run/tierce/memd.sock");
  BOOST_TEST(address_group("") == "");
}
