// coherence/key.cc — stable key hashing (see key.h).
#include "coherence/key.h"

#include <cctype>

namespace tierce::coherence {

std::string base_key(std::string_view host, std::string_view uri) {
  std::string k;
  k.reserve(host.size() + uri.size() + 1);
  for (char c : host) k.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  for (std::string_view port : {":80", ":443"}) {
    if (k.size() > port.size() && k.ends_with(port)) {
      k.resize(k.size() - port.size());
      break;
    }
  }
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
