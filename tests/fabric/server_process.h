// tests/fabric/server_process.h — a fabric::Server in a child process, for tests that need a
// real separate target (kill it, stop it, load it). RAII: the child is killed and reaped when the
// guard goes, whatever the test did.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "fabric/fabric.h"

namespace tierce::testing {

inline fabric::Secret test_secret() {
  return fabric::Secret("conformance-secret-0123456789");
}

inline std::string unique_socket_path(const std::string& tag) {
  static std::atomic<int> n{0};
  return "/tmp/tierce-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(n++) +
         ".sock";
}

// The listen URI for a backend name ("tcp", "shm", "verbs").
inline std::string listen_uri_for(const std::string& backend) {
  if (backend == "tcp") return "tcp://127.0.0.1:0";
  if (backend == "verbs") return "verbs://127.0.0.1:0";
  if (backend == "shm") return "shm://" + unique_socket_path("conf");
  throw std::invalid_argument("unknown backend " + backend);
}

struct ExportSpec {
  std::string name;
  std::shared_ptr<fabric::SharedSegment> seg;  // created by the parent before the fork
};

class ServerProcess {
 public:
  using Setup = std::function<void(fabric::Server&)>;
  // Runs in the child on the options before the Server is made (limits, protection, log sink).
  using Tweak = std::function<void(fabric::ServerOptions&)>;

  ServerProcess(const std::string& listen_uri, std::vector<ExportSpec> exports, Setup setup = {},
                fabric::Millis heartbeat = fabric::Millis(20),
                fabric::Millis lease = fabric::Millis(200), Tweak tweak = {})
      : listen_uri_(listen_uri) {
    int p[2];
    if (pipe(p) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ < 0) throw std::runtime_error("fork");
    if (pid_ == 0) {
      close(p[0]);
      try {
        fabric::ServerOptions o;
        o.name = "test-target";
        o.secret = test_secret();
        o.listen = {listen_uri};
        o.heartbeat = heartbeat;
        o.lease = lease;
        o.log = [](fabric::LogLevel l, std::string_view s) {
          if (l >= fabric::LogLevel::Warn)
            std::fprintf(stderr, "[target] %.*s\n", int(s.size()), s.data());
        };
        if (tweak) tweak(o);
        fabric::Server server(std::move(o));
        for (auto& e : exports) server.export_region(e.name, e.seg);
        if (setup) setup(server);
        std::string uri = server.bound_uris().at(0) + "\n";
        if (write(p[1], uri.data(), uri.size()) != ssize_t(uri.size())) _exit(3);
        close(p[1]);
        sigset_t s;
        sigemptyset(&s);
        sigaddset(&s, SIGTERM);
        sigprocmask(SIG_BLOCK, &s, nullptr);
        int sig = 0;
        sigwait(&s, &sig);
        server.stop();
        _exit(0);
      } catch (const std::exception& e) {
        std::string msg = std::string("ERROR ") + e.what() + "\n";
        (void)!write(p[1], msg.data(), msg.size());
        _exit(2);
      }
    }
    close(p[1]);
    std::string line;
    char c;
    while (read(p[0], &c, 1) == 1 && c != '\n') line += c;
    close(p[0]);
    if (line.empty() || line.rfind("ERROR", 0) == 0) {
      reap(SIGKILL);
      throw std::runtime_error("target server failed to start: " + line);
    }
    uri_ = line;
  }
  ~ServerProcess() {
    reap(SIGKILL);
    // A killed server leaves its Unix socket file behind: tidy up after it.
    if (listen_uri_.rfind("shm://", 0) == 0) ::unlink(listen_uri_.substr(6).c_str());
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& uri() const { return uri_; }
  pid_t pid() const { return pid_; }
  void kill_now() { reap(SIGKILL); }
  void pause() { ::kill(pid_, SIGSTOP); }
  void resume() { ::kill(pid_, SIGCONT); }
  // Clean stop (SIGTERM) and wait; returns the exit status.
  int terminate() {
    if (pid_ <= 0) return -1;
    ::kill(pid_, SIGTERM);
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    return st;
  }

 private:
  void reap(int sig) {
    if (pid_ > 0) {
      ::kill(pid_, SIGCONT);
      ::kill(pid_, sig);
      int st;
      waitpid(pid_, &st, 0);
      pid_ = -1;
    }
  }
  std::string listen_uri_;
  pid_t pid_ = -1;
  std::string uri_;
};

// Starts fn in `n` child processes (fork, no exec); wait_children() collects them. Fork these
// before starting threads of your own: a child inherits no threads, and ThreadSanitizer reports
// the parent's unjoined ones as leaked when the child exits.
inline std::vector<pid_t> spawn_children(int n, const std::function<int(int)>& fn) {
  std::vector<pid_t> kids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = fn(i);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "child %d: %s\n", i, e.what());
        rc = 1;
      }
      _exit(rc);
    }
    kids.push_back(pid);
  }
  return kids;
}

// Reaps every child; true when each exited 0.
inline bool wait_children(const std::vector<pid_t>& kids) {
  bool ok = true;
  for (pid_t k : kids) {
    int st = 0;
    waitpid(k, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) ok = false;
  }
  return ok;
}

// Runs fn in `n` child processes; returns true when every child exited 0.
inline bool run_in_children(int n, const std::function<int(int)>& fn) {
  return wait_children(spawn_children(n, fn));
}

}  // namespace tierce::testing
