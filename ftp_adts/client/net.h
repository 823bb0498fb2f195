// ftp_adts/client/net.h — the sockets tierce-ftp opens itself: an fd owner, a TCP connect with a
// deadline (the control connection and plain RFC 959 data connections; ADTS sessions connect
// inside tierce::adts), and the peer's numeric address (EPSV data goes to the same host).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>

#include "base/fd.h"

namespace tierce::ftpc {

using Millis = std::chrono::milliseconds;

using base::Fd;  // owns one fd (base/fd.h)

// Connects to host:port (names resolved; each address tried in turn) within `timeout`; the socket
// is returned in blocking mode. nodelay: TCP_NODELAY (control connections: small commands must
// not wait for Nagle). Throws ClientError{Network}: "cannot connect to HOST:PORT: <reason>".
Fd connect_tcp(const std::string& host, uint16_t port, Millis timeout, bool nodelay);

// The numeric address of the peer ("127.0.0.1", "::1").
std::string peer_address(int fd);

// Waits until fd is readable (or writable); false on timeout. Throws nothing.
bool wait_fd(int fd, bool for_write, Millis timeout);

}  // namespace tierce::ftpc
