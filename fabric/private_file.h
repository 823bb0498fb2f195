// fabric/private_file.h — reading a file that holds a credential (the cluster secret, a node
// key): it must be a regular file owned by the running user or root, with no group or other
// permission bits; anything else is refused with the fix in the message (chown, chmod 600).
#pragma once

#include <cstddef>
#include <string>

namespace tierce::fabric {

// The whole file, checked on the descriptor that is then read (it cannot be swapped in between),
// read into one buffer of its size (no reallocation leaves a copy behind). `what` names it in
// messages ("secret file", "node key file"); a file over `max_bytes` is refused saying
// `too_big_hint`. Throws FabricError (Config for a file that is not acceptable, System for I/O).
// The caller overwrites the returned bytes (OPENSSL_cleanse) once it has taken what it needs.
std::string read_private_file(const std::string& path, const std::string& what, size_t max_bytes,
                              const std::string& too_big_hint);

}  // namespace tierce::fabric
