// base/net.cc — address_group: the /64 of an IPv6 peer, the address of an IPv4 one.
#include "base/net.h"

#include <arpa/inet.h>

#include <cstring>

namespace tierce::base {

std::string address_group(std::string_view host) {
  std::string h(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (auto pct = h.find('%'); pct != std::string::npos) h.resize(pct);  // zone (fe80::1%eth0)
  in6_addr a6{};
  if (::inet_pton(AF_INET6, h.c_str(), &a6) != 1) return std::string(host);
  static const unsigned char kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char text[INET6_ADDRSTRLEN];
  if (std::memcmp(a6.s6_addr, kMapped, sizeof kMapped) == 0) {
    in_addr a4{};
    std::memcpy(&a4, a6.s6_addr + 12, 4);
    return ::inet_ntop(AF_INET, &a4, text, sizeof text) ? std::string(text) : std::string(host);
  }
  std::memset(a6.s6_addr + 8, 0, 8);  // keep the /64
  if (!::inet_ntop(AF_INET6, &a6, text, sizeof text)) return std::string(host);
  return std::string(text) + "/64";
}

}  // namespace tierce::base
