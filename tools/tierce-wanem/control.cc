// tools/tierce-wanem/control.cc — the control commands of tierce-wanem (see control.h).
#include "tools/tierce-wanem/control.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "tools/tierce-wanem/options.h"

namespace tierce::wanem {

const char* cut_name(unsigned cut) {
  switch (cut & kCutBoth) {
    case kCutNone:
      return "none";
    case kCutToTarget:
      return "to-target";
    case kCutToClient:
      return "to-client";
    default:
      return "both";
  }
}

namespace {

bool parse_dirs(const std::string& word, unsigned& dirs) {
  if (word == "to-target")
    dirs = kCutToTarget;
  else if (word == "to-client")
    dirs = kCutToClient;
  else if (word == "both")
    dirs = kCutBoth;
  else
    return false;
  return true;
}

}  // namespace

bool parse_command(const std::string& line, Command& out, std::string& error) {
  std::istringstream in(line);
  std::vector<std::string> w;
  for (std::string s; in >> s;) w.push_back(s);
  const std::string usage =
      "commands: cut to-target|to-client|both, heal [to-target|to-client|both], delay US, "
      "redirect HOST:PORT|off, reset, status";
  if (w.empty()) {
    error = "empty command (" + usage + ")";
    return false;
  }
  if (w[0] == "cut") {
    if (w.size() != 2 || !parse_dirs(w[1], out.dirs)) {
      error = "cut wants one of to-target, to-client, both";
      return false;
    }
    out.kind = Command::Kind::Cut;
    return true;
  }
  if (w[0] == "heal") {
    out.dirs = kCutBoth;
    if (w.size() > 2 || (w.size() == 2 && !parse_dirs(w[1], out.dirs))) {
      error = "heal wants nothing or one of to-target, to-client, both";
      return false;
    }
    out.kind = Command::Kind::Heal;
    return true;
  }
  if (w[0] == "delay") {
    try {
      if (w.size() != 2) throw UsageError("delay wants one number of microseconds");
      out.delay_us = parse_quantity(w[1], "delay");
    } catch (const UsageError& e) {
      error = e.what();
      return false;
    }
    if (out.delay_us > kMaxDelayUs) {
      error = "delay " + std::to_string(out.delay_us) + " is more than " +
              std::to_string(kMaxDelayUs) + " us (60 s)";
      return false;
    }
    out.kind = Command::Kind::Delay;
    return true;
  }
  if (w[0] == "redirect") {
    if (w.size() != 2) {
      error = "redirect wants one HOST:PORT (or off)";
      return false;
    }
    if (w[1] != "off") {
      try {
        Endpoint e = parse_endpoint(w[1], "redirect");
        if (e.count() != 1) throw UsageError("redirect: one port, not a range");
      } catch (const UsageError& e) {
        error = e.what();
        return false;
      }
    }
    out.kind = Command::Kind::Redirect;
    out.target = w[1];
    return true;
  }
  if (w[0] == "reset" && w.size() == 1) {
    out.kind = Command::Kind::Reset;
    return true;
  }
  if (w[0] == "status" && w.size() == 1) {
    out.kind = Command::Kind::Status;
    return true;
  }
  error = "unknown command '" + line + "' (" + usage + ")";
  return false;
}

std::string send_command(const std::string& path, const std::string& command, int timeout_ms) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) throw std::runtime_error(path + ": path too long");
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
    throw std::runtime_error("cannot connect to " + path + ": " + std::strerror(errno));
  std::string req = command + "\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size()))
    throw std::runtime_error("cannot send to " + path + ": " + std::strerror(errno));
  std::string reply;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    deadline - std::chrono::steady_clock::now())
                    .count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || ::poll(&p, 1, int(left)) == 0)
      throw std::runtime_error("no answer from " + path + " within " + std::to_string(timeout_ms) +
                               " ms");
    char buf[512];
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(path + " closed the connection without an answer");
    reply.append(buf, size_t(n));
    if (auto nl = reply.find('\n'); nl != std::string::npos) return reply.substr(0, nl);
  }
}

}  // namespace tierce::wanem
