// tests/ftp/server/ftpd_harness.h — what the tierce-ftpd tests share: running the real binary
// (once, or as a server in the foreground on an ephemeral port), and a raw FTP client over plain
// sockets that shows every reply as the server sent it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ftp_adts/ftp/protocol.h"
#include "tests/support/process.h"
#include "tests/test_util.h"

namespace ftpd_test {

struct RunResult {
  int code = -1;  // exit code; 128+n when killed by signal n
  std::string out, err;
};
// Runs tierce-ftpd with `args`, feeding `input` on stdin; bounded by 60 s.
RunResult run_ftpd(const std::vector<std::string>& args, const std::string& input = "");

// Started as root, tierce-ftpd runs a session as its account after login (privilege separation,
// docs/ftp.md): a writable tree must belong to that account. Chowns `path` and everything below
// it to `account` when the test runs as root; does nothing otherwise. Throws when the account does
// not exist.
void give_to(const std::string& path, const std::string& account = "nobody");
// True when the tests run as root (privilege separation is on in the servers they start).
bool running_as_root();

// A crypt(3) hash made by the binary (--hash-password).
std::string hash_of(const std::string& password);

// tierce-ftpd --foreground on 127.0.0.1:0 with `config_body` (listen/ready_file are added), in its
// own temp dir. Stopped (SIGTERM) by stop() or the destructor.
class Server {
 public:
  Server(const tierce_test::TempDir& dir, const std::string& config_body);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  uint16_t port() const { return port_; }
  pid_t pid() const { return ftpd_.pid(); }
  int stop();  // SIGTERM; the exit code
  std::string log() const;  // its stderr so far
  // Its worker processes (children), from /proc.
  std::vector<pid_t> workers() const;
  // Every process below it (workers, and under privilege separation their pre-login and
  // session processes), from /proc.
  std::vector<pid_t> descendants() const;
  // The worker (a child of the server) that `pid` is or descends from; -1 when none.
  pid_t worker_of(pid_t pid) const;

 private:
  tierce_test::Child ftpd_;
  uint16_t port_ = 0;
  std::string err_path_;
};

// A raw FTP client.
class Client {
 public:
  explicit Client(uint16_t port);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  int fd() const { return fd_; }
  // The next reply (up to 30 s); code 0 when the connection closed first.
  tierce::ftp::Reply reply();
  tierce::ftp::Reply cmd(const std::string& line);
  void send_raw(const std::string& bytes);
  bool login(const std::string& user, const std::string& pass);
  uint16_t pasv();  // PASV; 0 on failure
  uint16_t epsv();  // EPSV; 0 on failure
  // Opens a data connection to the given port on 127.0.0.1.
  static int data_connect(uint16_t port);
  static std::string read_all(int fd);  // until EOF, closes fd
  static void write_all_close(int fd, const std::string& bytes);
  // RETR/LIST... over PASV: the bytes and the final reply code.
  std::string retrieve(const std::string& command, int* final_code);
  int store(const std::string& command, const std::string& bytes);

 private:
  int fd_ = -1;
  tierce::ftp::ReplyParser parser_;
};

// A client on `port` that got the 220 greeting and logged in as `user`; throws
// std::runtime_error saying which step failed.
std::unique_ptr<Client> logged_in(uint16_t port, const std::string& user, const std::string& pass);

// The pid of the worker serving `c` (STAT: "Session pid N"); -1 when STAT does not say.
pid_t session_pid(Client& c);

// VmRSS of `pid` in KiB (/proc/PID/status); -1 when it is gone.
long vm_rss_kib(pid_t pid);

// Samples a process's VmRSS at construction, then every 10 ms until stopped; keeps the peak (KiB).
class RssSampler {
 public:
  explicit RssSampler(pid_t pid);
  ~RssSampler() { stop(); }
  RssSampler(const RssSampler&) = delete;
  RssSampler& operator=(const RssSampler&) = delete;
  long stop();  // the peak

 private:
  pid_t pid_;
  std::atomic<bool> stop_{false};
  std::atomic<long> peak_{0};
  std::thread t_;
};

// ADTS frames written by hand (docs/ftp.md "ADTS"), for tests that speak to a listener raw: a
// stream's HELLO, a block header, and the status of the HELLO-ACK read from `fd` (-1 when the
// stream closed or the socket's receive timeout passed before all 8 bytes came).
std::string adts_hello(uint64_t cookie, uint16_t index = 0, uint16_t streams = 1);
std::string adts_block(uint8_t type, uint64_t id, uint64_t off, uint64_t len);
int read_hello_ack(int fd);

}  // namespace ftpd_test
