// base/net.h — network address helpers shared by the servers' per-address limits.
#pragma once

#include <string>
#include <string_view>

namespace tierce::base {

// The group a per-address connection limit counts a peer in: an IPv4 address as itself; an
// IPv6 address by its /64 prefix ("2001:db8:1:2::/64"), because one host or user commonly holds a
// whole /64 and could otherwise open max-per-address connections from each of its 2^64
// addresses; an IPv4-mapped IPv6 address (::ffff:a.b.c.d) as the IPv4 address. Brackets around
// an IPv6 address are accepted. Anything else (a host name, a unix socket path) is returned as
// given.
std::string address_group(std::string_view host);

}  // namespace tierce::base
