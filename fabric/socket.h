// fabric/socket.h — sockets with deadlines: every blocking call here takes a deadline and throws
// FabricError{Timeout} past it, so a dead or silent peer can never hang a caller.
#pragma once

#include <chrono>
#include <optional>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include "base/fd.h"

namespace tierce::fabric {

using Deadline = std::chrono::steady_clock::time_point;
inline Deadline deadline_in(std::chrono::milliseconds t) {
  return std::chrono::steady_clock::now() + t;
}
inline constexpr Deadline kNoDeadline = Deadline::max();

using base::Fd;  // RAII file descriptor (base/fd.h)

Fd tcp_listen(const std::string& host, uint16_t port, uint16_t* bound_port);
Fd unix_listen(const std::string& path);  // replaces a stale socket file
Fd tcp_connect(const std::string& host, uint16_t port, Deadline d);
Fd unix_connect(const std::string& path, Deadline d);
// Accepts one connection; returns an invalid Fd when the listener was shut down.
Fd accept_conn(int listen_fd, std::string* peer);

// Waits for readability/writability; throws Timeout past the deadline.
void wait_readable(int fd, Deadline d);
void wait_writable(int fd, Deadline d);
// Sends everything or throws (PeerClosed, Timeout, System).
void send_all(int fd, const void* buf, size_t len, Deadline d);
// Receives exactly len bytes or throws; returns false on a clean EOF before the first byte when
// eof_ok is set (the peer closed between frames).
bool recv_exact(int fd, void* buf, size_t len, Deadline d, bool eof_ok = false);
// Receives up to len bytes (0 = EOF).
size_t recv_some(int fd, void* buf, size_t len, Deadline d);
// Polls the socket without sleeping for up to `spin` (see ClientOptions::spin): the bytes read,
// or nullopt when nothing came (or on an error, which a following recv_some reports).
std::optional<size_t> recv_spin(int fd, void* buf, size_t len, std::chrono::microseconds spin);

// Unix sockets: a message of `len` bytes carrying one file descriptor (SCM_RIGHTS).
void send_with_fd(int sock, const void* buf, size_t len, int fd_to_pass, Deadline d);
// Receives exactly len bytes; *fd_out gets the passed descriptor or -1.
void recv_with_fd(int sock, void* buf, size_t len, int* fd_out, Deadline d);

void set_nodelay(int fd);

}  // namespace tierce::fabric
