// tests/ftp/server/ftpd_harness.cc
#include "tests/ftp/server/ftpd_harness.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <thread>

namespace ftpd_test {

using namespace std::chrono_literals;

namespace {

// The exit code within `limit`, 128 + the signal that ended it, or -2 when it had to be killed.
int exit_code_within(tierce_test::Child& c, std::chrono::milliseconds limit) {
  int code = c.wait_exit(limit);
  if (c.running()) {
    c.kill_now();
    return -2;
  }
  return c.killed_by() ? 128 + c.killed_by() : code;
}

tierce_test::Child spawn_ftpd(const std::vector<std::string>& args, const tierce_test::Stdio& io) {
  return tierce_test::spawn(TIERCE_FTPD_BIN, args, io);
}

}  // namespace

RunResult run_ftpd(const std::vector<std::string>& args, const std::string& input) {
  tierce_test::TempDir d;
  tierce_test::write_file(d / "in", input);
  auto ftpd = spawn_ftpd(args, {d / "in", d / "out", d / "err", false});
  RunResult r;
  r.code = exit_code_within(ftpd, 60s);
  r.out = tierce_test::read_file(d / "out");
  r.err = tierce_test::read_file(d / "err");
  return r;
}

bool running_as_root() { return ::geteuid() == 0; }

void give_to(const std::string& path, const std::string& account) {
  if (!running_as_root()) return;
  passwd* pw = ::getpwnam(account.c_str());
  if (!pw) throw std::runtime_error("no account " + account);
  std::error_code ec;
  auto own = [&](const std::string& p) {
    if (::lchown(p.c_str(), pw->pw_uid, pw->pw_gid) != 0)
      throw std::runtime_error("lchown " + p + ": " + std::strerror(errno));
  };
  own(path);
  for (auto it = std::filesystem::recursive_directory_iterator(path, ec);
       it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
    own(it->path().string());
}

std::string hash_of(const std::string& password) {
  RunResult r = run_ftpd({"--hash-password"}, password + "\n");
  if (r.code != 0) throw std::runtime_error("--hash-password failed: " + r.err);
  std::string h = r.out;
  while (!h.empty() && (h.back() == '\n' || h.back() == '\r')) h.pop_back();
  return h;
}

Server::Server(const tierce_test::TempDir& dir, const std::string& config_body) {
  std::string cfg = dir / "ftpd.toml";
  std::string ready = dir / "ready";
  ::unlink(ready.c_str());
  tierce_test::write_file(cfg, "listen = \"127.0.0.1:0\"\nready_file = \"" + ready + "\"\n" +
                                   config_body);
  err_path_ = dir / "ftpd.err";
  ftpd_ = spawn_ftpd({"-c", cfg, "--foreground"}, {"/dev/null", dir / "ftpd.out", err_path_, false});
  bool up = tierce_test::eventually(
      [&] {
        std::string s = tierce_test::read_file(ready);
        if (s.empty() || s.back() != '\n') return false;
        port_ = uint16_t(std::stoul(s));
        return true;
      },
      30s);
  if (!up) {
    ftpd_.kill_now();
    throw std::runtime_error("tierce-ftpd did not start: " + tierce_test::read_file(err_path_));
  }
}

Server::~Server() {
  if (ftpd_.running()) stop();
}

int Server::stop() {
  if (!ftpd_.running()) return -1;
  ftpd_.signal(SIGTERM);
  return exit_code_within(ftpd_, 20s);
}

std::string Server::log() const {
  return tierce_test::read_file(err_path_);
}

namespace {
// pid -> ppid of every live (not zombie) process, from /proc.
std::map<pid_t, pid_t> process_parents() {
  std::map<pid_t, pid_t> out;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    std::getline(in, line);
    // pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
    size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %ld", &state, &ppid) != 2) continue;
    if (state != 'Z') out[pid_t(std::stol(e->d_name))] = pid_t(ppid);
  }
  ::closedir(d);
  return out;
}
}  // namespace

std::vector<pid_t> Server::workers() const {
  std::vector<pid_t> out;
  for (auto [pid, ppid] : process_parents())
    if (ppid == ftpd_.pid()) out.push_back(pid);
  return out;
}

std::vector<pid_t> Server::descendants() const {
  const std::map<pid_t, pid_t> parents = process_parents();
  std::vector<pid_t> out;
  for (auto [pid, ppid] : parents) {
    pid_t up = ppid;
    for (int depth = 0; depth < 8 && up > 1; ++depth) {
      if (up == ftpd_.pid()) {
        out.push_back(pid);
        break;
      }
      auto it = parents.find(up);
      up = it == parents.end() ? 0 : it->second;
    }
  }
  return out;
}

pid_t Server::worker_of(pid_t pid) const {
  const std::map<pid_t, pid_t> parents = process_parents();
  for (int depth = 0; depth < 8; ++depth) {
    auto it = parents.find(pid);
    if (it == parents.end()) return -1;
    if (it->second == ftpd_.pid()) return pid;
    pid = it->second;
  }
  return -1;
}

Client::Client(uint16_t port) {
  fd_ = data_connect(port);
  if (fd_ < 0) throw std::runtime_error("cannot connect to the server");
}

Client::~Client() {
  if (fd_ >= 0) ::close(fd_);
}

tierce::ftp::Reply Client::reply() {
  auto deadline = std::chrono::steady_clock::now() + 30s;
  for (;;) {
    if (auto r = parser_.take()) return *r;
    if (parser_.error()) return {};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return {};
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, int(left.count())) <= 0) return {};
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) return {};
    parser_.feed({buf, size_t(n)});
  }
}

void Client::send_raw(const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return;
    off += size_t(n);
  }
}

tierce::ftp::Reply Client::cmd(const std::string& line) {
  send_raw(line + "\r\n");
  return reply();
}

bool Client::login(const std::string& user, const std::string& pass) {
  if (cmd("USER " + user).code != 331) return false;
  return cmd("PASS " + pass).code == 230;
}

uint16_t Client::pasv() {
  auto r = cmd("PASV");
  if (r.code != 227) return 0;
  auto hp = tierce::ftp::parse_pasv_reply(r.text());
  return hp ? hp->port : 0;
}

uint16_t Client::epsv() {
  auto r = cmd("EPSV");
  if (r.code != 229) return 0;
  auto p = tierce::ftp::parse_epsv_reply(r.text());
  return p ? *p : 0;
}

int Client::data_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    return -1;
  }
  timeval tv{30, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

std::string Client::read_all(int fd) {
  std::string s;
  char buf[65536];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    s.append(buf, size_t(n));
  }
  ::close(fd);
  return s;
}

void Client::write_all_close(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n <= 0) break;
    off += size_t(n);
  }
  ::close(fd);
}

std::string Client::retrieve(const std::string& command, int* final_code) {
  *final_code = 0;
  uint16_t port = pasv();
  if (!port) return {};
  int d = data_connect(port);
  auto r = cmd(command);
  if (r.code != 150) {
    if (d >= 0) ::close(d);
    *final_code = r.code;
    return {};
  }
  std::string data = read_all(d);
  *final_code = reply().code;
  return data;
}

int Client::store(const std::string& command, const std::string& bytes) {
  uint16_t port = pasv();
  if (!port) return 0;
  int d = data_connect(port);
  auto r = cmd(command);
  if (r.code != 150) {
    if (d >= 0) ::close(d);
    return r.code;
  }
  write_all_close(d, bytes);
  return reply().code;
}

std::unique_ptr<Client> logged_in(uint16_t port, const std::string& user,
                                  const std::string& pass) {
  auto c = std::make_unique<Client>(port);
  auto greeting = c->reply();
  if (greeting.code != 220)
    throw std::runtime_error("expected the 220 greeting, got " + std::to_string(greeting.code) +
                             " " + greeting.text());
  if (!c->login(user, pass)) throw std::runtime_error("login as " + user + " failed");
  return c;
}

pid_t session_pid(Client& c) {
  std::string t = c.cmd("STAT").text();
  auto at = t.find("Session pid ");
  if (at == std::string::npos) return -1;
  return pid_t(std::atol(t.c_str() + at + 12));
}

long vm_rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  return -1;  // gone
}

// The first sample is taken here, not by the thread: a loaded machine may start the thread only
// after stop(), and a probe that ends quickly must still have its peak.
RssSampler::RssSampler(pid_t pid)
    : pid_(pid), peak_(vm_rss_kib(pid)), t_([this] {
        while (!stop_) {
          long r = vm_rss_kib(pid_);
          if (r > peak_) peak_ = r;
          std::this_thread::sleep_for(10ms);
        }
      }) {}

long RssSampler::stop() {
  stop_ = true;
  if (t_.joinable()) t_.join();
  return peak_;
}

namespace {
void put_le(std::string* out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out->push_back(char((v >> (8 * i)) & 0xff));
}
}  // namespace

std::string adts_hello(uint64_t cookie, uint16_t index, uint16_t streams) {
  std::string h;
  put_le(&h, 0x53444154, 4);
  put_le(&h, 1, 2);
  put_le(&h, index, 2);
  put_le(&h, streams, 2);
  put_le(&h, 0, 2);
  put_le(&h, cookie, 8);
  put_le(&h, 0, 4);
  return h;
}

std::string adts_block(uint8_t type, uint64_t id, uint64_t off, uint64_t len) {
  std::string b;
  put_le(&b, 0x4b4c4254, 4);
  b.push_back(char(type));
  b.append(3, '\0');
  put_le(&b, id, 8);
  put_le(&b, off, 8);
  put_le(&b, len, 8);
  return b;
}

int read_hello_ack(int fd) {
  unsigned char ack[8];
  size_t got = 0;
  while (got < sizeof ack) {
    ssize_t n = ::recv(fd, ack + got, sizeof ack - got, 0);
    if (n <= 0) break;
    got += size_t(n);
  }
  if (got != sizeof ack) return -1;
  return int(ack[4] | ack[5] << 8 | ack[6] << 16 | uint32_t(ack[7]) << 24);
}

}  // namespace ftpd_test
