// json.h — a small JSON reader (for cluster.json) and string escaping (for --json output).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tcheck {

struct Json {
  enum Type { Null, Bool, Number, String, Array, Object } type = Null;
  bool b = false;
  double num = 0;
  std::string str;
  std::vector<Json> arr;
  std::map<std::string, Json> obj;

  const Json* get(const std::string& k) const {
    if (type != Object) return nullptr;
    auto it = obj.find(k);
    return it == obj.end() ? nullptr : &it->second;
  }
};

// Parses text; false with err (and the offset) when malformed.
bool json_parse(const std::string& text, Json& out, std::string& err);
std::string json_escape(const std::string& s);  // with the quotes

}  // namespace tcheck
