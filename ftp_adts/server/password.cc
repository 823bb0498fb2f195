// ftp_adts/server/password.cc — crypt_gensalt_ra/crypt_ra (thread-safe, heap scratch space).
#include "ftp_adts/server/password.h"

#include <crypt.h>
#include <openssl/crypto.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace tierce::ftpd {

namespace {
struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};
// crypt_ra's scratch space (a struct crypt_data) holds the password and the computed hash: it is
// overwritten before it is freed, so neither stays in the process (privsep.h).
struct Scratch {
  void* data = nullptr;
  int size = 0;
  ~Scratch() {
    if (data) {
      ::explicit_bzero(data, size_t(size));
      std::free(data);
    }
  }
};
}  // namespace

std::string hash_password(const std::string& password) {
  // nullptr random bytes: libcrypt takes them from the kernel (getentropy).
  std::unique_ptr<char, FreeDeleter> salt(crypt_gensalt_ra("$y$", 0, nullptr, 0));
  if (!salt) throw std::runtime_error(std::string("crypt_gensalt: ") + std::strerror(errno));
  Scratch scratch;
  char* h = crypt_ra(password.c_str(), salt.get(), &scratch.data, &scratch.size);
  if (!h || h[0] == '*') throw std::runtime_error("crypt: cannot hash with yescrypt");
  return h;
}

bool verify_password(const std::string& password, const std::string& hash) {
  if (hash.empty() || hash[0] != '$') return false;
  Scratch scratch;
  char* h = crypt_ra(password.c_str(), hash.c_str(), &scratch.data, &scratch.size);
  // A failure is "*0"/"*1" (or nullptr), never equal to a real hash.
  if (!h || h[0] == '*') return false;
  size_t n = std::strlen(h);
  if (n != hash.size()) return false;
  return CRYPTO_memcmp(h, hash.data(), n) == 0;
}

std::string dummy_hash_for(const std::vector<std::string>& known) {
  for (const auto& h : known)
    if (!h.empty()) return h;
  static const std::string fallback = hash_password("tierce-dummy");
  return fallback;
}

}  // namespace tierce::ftpd
