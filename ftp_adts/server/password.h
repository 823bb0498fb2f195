// ftp_adts/server/password.h — password hashes of ftpd.toml: crypt(3) from libcrypt (libxcrypt).
// New hashes are yescrypt ("$y$"); anything libcrypt knows ("$6$" sha512crypt, ...) verifies.
#pragma once

#include <string>

namespace tierce::ftpd {

// A fresh "$y$..." hash of `password` (random salt). Throws std::runtime_error.
std::string hash_password(const std::string& password);

// Whether `password` matches `hash`. The computed hash is compared in constant time, so the
// comparison itself leaks nothing about how much of it matched.
bool verify_password(const std::string& password, const std::string& hash);

}  // namespace tierce::ftpd
