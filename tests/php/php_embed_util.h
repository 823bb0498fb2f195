// tests/php/php_embed_util.h — PHP's embed SAPI for the extension's tests, one way: `Embed`
// starts PHP once per process with its output captured, and run() executes PHP code as one
// request (the previous request is shut down first, so each sees a fresh request state) with the
// given ini settings. Include after nlohmann/json (PHP's headers #define snprintf).
#pragma once

#include <boost/test/unit_test.hpp>

#include <sapi/embed/php_embed.h>
#include "zend_ini.h"

#include <map>
#include <string>

namespace php_test {

class Embed {
 public:
  // Starts the embed SAPI (php.ini from PHPRC, set by the caller before this).
  Embed() {
    php_embed_module.ub_write = capture;
    BOOST_REQUIRE(php_embed_init(0, nullptr) == SUCCESS);
  }
  ~Embed() {
    if (in_request_) php_embed_shutdown();
  }
  Embed(const Embed&) = delete;
  Embed& operator=(const Embed&) = delete;

  // Runs `src` (PHP without the opening tag) as one request after setting `ini` (system level);
  // returns what it printed. An exception that escapes is printed by PHP itself.
  // `as_script`: warnings name their function, as php_execute_script's requests do.
  std::string run(const std::string& src, const std::map<std::string, std::string>& ini = {},
                  bool as_script = false) {
    if (in_request_) php_request_shutdown(nullptr);
    in_request_ = false;
    for (const auto& [k, v] : ini) {
      zend_string* name = zend_string_init(k.data(), k.size(), 0);
      BOOST_REQUIRE_MESSAGE(zend_alter_ini_entry_chars(name, v.data(), v.size(), ZEND_INI_SYSTEM,
                                                       ZEND_INI_STAGE_RUNTIME) == SUCCESS,
                            "cannot set " << k);
      zend_string_release(name);
    }
    output().clear();
    BOOST_REQUIRE(php_request_startup() == SUCCESS);
    in_request_ = true;
    if (as_script) PG(during_request_startup) = 0;
    std::string code = src;
    zend_try {
      zend_eval_stringl(code.data(), code.size(), nullptr, const_cast<char*>("test"));
    }
    zend_end_try();
    return output();
  }
  // What PHP printed in the current request so far.
  static std::string& output() {
    static std::string out;
    return out;
  }

 private:
  static size_t capture(const char* s, size_t n) {
    output().append(s, n);
    return n;
  }
  bool in_request_ = true;  // php_embed_init leaves one open
};

}  // namespace php_test
