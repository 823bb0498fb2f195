// tests/dlm/client/test_util.h — what the client/IPC/CLI tests share: a temporary directory, a
// log capture, an IpcServer over the in-memory TestLockService, raw sockets, polling helpers.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "agents/lockd/ipc_server.h"
#include "dlm/ipc.h"
#include "test_service.h"
#include "tests/test_util.h"

namespace dlm_test {

using namespace std::chrono_literals;

using tierce_test::LogCapture;
using tierce_test::TempDir;

// An IpcServer in front of a TestLockService, on a socket in a fresh directory. The service is
// declared first: it outlives the server.
struct ServerFixture {
  TempDir dir;
  std::string sock = dir / "lockd.sock";
  LogCapture log;
  TestLockService svc;
  std::unique_ptr<tierce::lockd::IpcServer> ipc;
  explicit ServerFixture(bool async = false, tierce::lockd::IpcOptions o = {}) : svc(async) {
    ipc = std::make_unique<tierce::lockd::IpcServer>(sock, svc, log.sink(), o);
  }
};

// Polls `cond` every millisecond (these tests wait on a local server) until it holds or `limit`
// passes: tierce_test::eventually with a finer step.
inline bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit = 5s) {
  return tierce_test::eventually(cond, limit, 1ms);
}

inline bool readable(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

// A raw SEQPACKET connection to the server, to send what no client library would.
struct RawConn {
  int fd = -1;
  explicit RawConn(const std::string& path) {
    fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, path.c_str(), sizeof a.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::runtime_error("connect " + path + ": " + std::strerror(errno));
  }
  ~RawConn() {
    if (fd >= 0) ::close(fd);
  }
  void send(const std::vector<uint8_t>& b) {
    if (::send(fd, b.data(), b.size(), MSG_NOSIGNAL) != ssize_t(b.size()))
      throw std::runtime_error(std::string("send: ") + std::strerror(errno));
  }
  // The next frame from lockd, decoded; nullopt when none came within `ms`.
  std::optional<tierce::dlm::ipc::Event> recv(int ms = 2000) {
    if (!readable(fd, ms)) return std::nullopt;
    uint8_t buf[tierce::dlm::ipc::kMaxFrame];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return std::nullopt;
    tierce::dlm::ipc::DecodeError err;
    return tierce::dlm::ipc::decode_event(std::span<const uint8_t>(buf, size_t(n)), &err);
  }
};

template <class T>
std::vector<uint8_t> encoded(const T& x) {
  tierce::dlm::ipc::Frame f;
  tierce::dlm::ipc::encode(x, &f);
  return {f.bytes, f.bytes + f.size};
}

}  // namespace dlm_test
