// coherence/key.cc — stable key hashing (see key.h).
#include "coherence/key.h"

#include <cctype>

namespace tierce::coherence {

std::string base_key(std::string_view scheme, std::string_view host, std::string_view uri) {
  std::string k;
  k.reserve(scheme.size() + 3 + host.size() + 1 + uri.size());
  for (char c : scheme) k.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  std::string_view default_port = k == "http" ? ":80" : k == "https" ? ":443" : "";
  k.append("://");
  size_t host_start = k.size();
  for (char c : host) k.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  if (!default_port.empty() && k.size() - host_start > default_port.size() &&
      k.ends_with(default_port))
    k.resize(k.size() - default_port.size());
  k.push_back('\n');
  k.append(uri);
  return k;
}

std::string variant_key(std::string_view base, std::string_view vary_values) {
  std::string k(base);
  k.push_back('\0');
  k.append(vary_values);
  return k;
}


}  // namespace tierce::coherence
