// ftp_adts/server/password.h — password hashes of ftpd.toml: crypt(3) from libcrypt (libxcrypt).
// New hashes are yescrypt ("$y$"); anything libcrypt knows ("$6$" sha512crypt, ...) verifies.
#pragma once

#include <string>
#include <vector>

namespace tierce::ftpd {

// A fresh "$y$..." hash of `password` (random salt). Throws std::runtime_error.
std::string hash_password(const std::string& password);

// Whether `password` matches `hash`. The computed hash is compared in constant time, so the
// comparison itself leaks nothing about how much of it matched.
bool verify_password(const std::string& password, const std::string& hash);

// What an unknown user's password is checked against, so that a failed login costs the same
// whether the name exists or not (no user enumeration by timing): the first hash of `known` (the
// configured users'), i.e. the algorithm and cost of a real entry whatever they are ("$6$" entries
// with a "$y$" dummy answered unknown names measurably faster or slower); with none, a fresh
// default ("$y$") hash. The outcome of that check is ignored by the caller.
std::string dummy_hash_for(const std::vector<std::string>& known);

}  // namespace tierce::ftpd
