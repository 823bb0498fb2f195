// tests/dlm/fence_holder.cc — a lock client of the fencing test (fence.py), driven line by line on
// stdin; it writes to the test's token-checking store (a TCP server of the driver) with the
// fencing token of its last grant.
//
// Usage: fence_holder SOCKET LOCKNAME STORE_PORT CLIENT_NAME
//
// Commands (stdin, one per line) and their answers (stdout, one line each, flushed):
//   lock excl|shared TIMEOUT_MS  -> "GRANTED <token> <waited_ms> <CLOCK_MONOTONIC ms>"
//                                   "FAILED <status> <waited_ms> <message>"
//   write TAG                    -> "STORE <the store's answer line>", e.g. "STORE ACCEPTED" or
//                                   "STORE REFUSED <highest token accepted>"; the token sent is
//                                   that of the last grant, even when the hold was revoked or
//                                   unlocked since (a stale client: what the store must refuse)
//   unlock                       -> "UNLOCKED" | "FAILED <status> 0 <message>"
//   ping                         -> "PONG <CLOCK_MONOTONIC ms>" (the process runs again)
//   quit                         -> exits 0
// Between commands it watches LockClient::event_fd(): every revocation is printed at once as
//   "EVENT REVOKED <hold> <CLOCK_MONOTONIC ms> <why>"
// (the same clock as Python's time.monotonic(): the driver dates the revocation).
// Exit: 0 on quit or end of input, 1 on an unexpected error, 2 bad usage.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>

#include "dlm/client.h"

using tierce::dlm::HeldLock;
using tierce::dlm::LockClient;
using tierce::dlm::LockError;
using tierce::dlm::Mode;
using tierce::dlm::Token;

namespace {

// "Timeout", "NotHeld", ...: one word (the protocol's enum names, not to_string's phrases).
std::string status_word(tierce::dlm::Status s) {
  using tierce::dlm::Status;
  switch (s) {
    case Status::Ok: return "Ok";
    case Status::Timeout: return "Timeout";
    case Status::WouldBlock: return "WouldBlock";
    case Status::NotHeld: return "NotHeld";
    case Status::HomeDown: return "HomeDown";
    case Status::BadName: return "BadName";
    case Status::LeaseLost: return "LeaseLost";
    case Status::TooMany: return "TooMany";
    case Status::ShuttingDown: return "ShuttingDown";
    case Status::BadRequest: return "BadRequest";
    case Status::Internal: return "Internal";
  }
  return "Status" + std::to_string(int(s));
}

long long mono_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

// One request to the store: connect, send a line, read the answer line, close.
std::string store_request(int port, const std::string& line) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::string("ERROR socket: ") + std::strerror(errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    std::string e = std::string("ERROR connect: ") + std::strerror(errno);
    ::close(fd);
    return e;
  }
  std::string out = line + "\n";
  size_t off = 0;
  while (off < out.size()) {
    ssize_t n = ::write(fd, out.data() + off, out.size() - off);
    if (n <= 0) {
      ::close(fd);
      return "ERROR write to the store failed";
    }
    off += size_t(n);
  }
  std::string answer;
  char c;
  while (::read(fd, &c, 1) == 1 && c != '\n') answer += c;
  ::close(fd);
  return answer.empty() ? "ERROR the store closed without answering" : answer;
}

// Stamped before revoked() is called: taking a revocation acknowledges it, and lockd may let
// the home grant the lock to another client before this line is written. From this moment the
// caller uses the hold no more (it is in the call that tells it).
void report_revocations(LockClient& client) {
  const long long t = mono_ms();
  for (auto& r : client.revoked())
    say("EVENT REVOKED " + std::to_string(r.hold) + " " + std::to_string(t) + " " + r.why);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s SOCKET LOCKNAME STORE_PORT CLIENT_NAME\n", argv[0]);
    return 2;
  }
  const std::string socket = argv[1], lock = argv[2], who = argv[4];
  const int port = std::atoi(argv[3]);
  try {
    LockClient client(socket);
    HeldLock held;
    Token token = 0;  // of the last grant: kept after a revocation or an unlock
    std::string buf;  // stdin, read raw (no stdio buffering behind poll's back)
    bool eof = false;
    for (;;) {
      size_t nl = buf.find('\n');
      if (nl == std::string::npos) {
        if (eof) return 0;
        pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {client.event_fd(), POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0) {
          if (errno == EINTR) continue;
          std::perror("poll");
          return 1;
        }
        if (fds[1].revents) report_revocations(client);
        if (fds[0].revents) {
          char chunk[4096];
          ssize_t n = ::read(STDIN_FILENO, chunk, sizeof chunk);
          if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            eof = true;
            buf += '\n';
          } else {
            buf.append(chunk, size_t(n));
          }
        }
        continue;
      }
      const std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      std::istringstream in(line);
      std::string cmd;
      in >> cmd;
      if (cmd == "lock") {
        std::string mode;
        long timeout_ms = 0;
        in >> mode >> timeout_ms;
        const long long t0 = mono_ms();
        try {
          held = client.lock(lock, mode == "shared" ? Mode::Shared : Mode::Exclusive,
                             std::chrono::milliseconds(timeout_ms));
          token = held.token();
          const long long now = mono_ms();
          say("GRANTED " + std::to_string(token) + " " + std::to_string(now - t0) + " " +
              std::to_string(now));
        } catch (const LockError& e) {
          say("FAILED " + status_word(e.status()) + " " +
              std::to_string(mono_ms() - t0) + " " + e.what());
        }
      } else if (cmd == "write") {
        std::string tag;
        in >> tag;
        say("STORE " + store_request(port, "WRITE " + lock + " " + std::to_string(token) + " " +
                                               who + " " + (tag.empty() ? "-" : tag)));
      } else if (cmd == "unlock") {
        try {
          if (!held) throw LockError(tierce::dlm::Status::NotHeld, "no hold in this client");
          held.unlock();
          held = HeldLock();
          say("UNLOCKED");
        } catch (const LockError& e) {
          held.release_ownership();  // nothing to release any more
          held = HeldLock();
          say("FAILED " + status_word(e.status()) + " 0 " + e.what());
        }
      } else if (cmd == "ping") {
        say("PONG " + std::to_string(mono_ms()));
      } else if (cmd == "quit") {
        return 0;
      } else if (!cmd.empty()) {
        say("ERROR unknown command " + cmd);
      }
      report_revocations(client);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fence_holder %s: %s\n", who.c_str(), e.what());
    say(std::string("FATAL ") + e.what());
    return 1;
  }
}
