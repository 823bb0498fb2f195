// base/unix_socket.h — a daemon's local SOCK_SEQPACKET listener (tierce-lockd's socket, the
// writer agent's socket): never steals a live server's path, removes a dead one's socket file,
// sets the mode (and group) before listen() so no client connects under the umask's mode.
#pragma once

#include <sys/types.h>

#include <string>

#include "base/fd.h"
#include "base/status.h"

namespace tierce::base {

struct UnixListenOptions {
  mode_t mode = 0660;
  // chgrp the socket to this group (gid), so its members may connect; -1: keep the process's.
  gid_t group = gid_t(-1);
  // What serves it, for messages ("tierce-lockd", "the writer agent").
  std::string who = "server";
};

// Binds and listens on `path` (SOCK_SEQPACKET, non-blocking, close-on-exec). Fails with
// AlreadyExists when a live server answers there (its pid in the message), FailedPrecondition when
// the path is something else than a socket, InvalidArgument for a path too long, Internal for a
// failed system call (the call and its errno text in the message). `removed_stale` is set when a
// dead server's socket file was removed first.
Result<Fd> listen_unix_seqpacket(const std::string& path, const UnixListenOptions& o,
                                 bool* removed_stale = nullptr);

// The numeric group of `name`, or NotFound.
Result<gid_t> lookup_group(const std::string& name);

}  // namespace tierce::base
