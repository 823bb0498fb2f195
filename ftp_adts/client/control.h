// ftp_adts/client/control.h — FtpClient: one FTP session of tierce-ftp. The control connection
// (connect deadline, TCP_NODELAY, optional AUTH TLS + PBSZ 0 + PROT P), login (anonymous when no
// user), FEAT, TYPE I, and the data path:
//   * ADTS (docs/ftp.md "TPRT"): when FEAT lists TPRT and --adts allows it, one TPRT + EPSV opens
//     a persistent data session; every transfer of this client goes over it, and batches of RETR
//     are pipelined (a window of commands in flight, replies and transfers read in order) so many
//     small files cost one round trip each way in total instead of several per file.
//   * plain RFC 959: a passive data connection per transfer (EPSV, PASV when EPSV is refused).
// Not thread-safe: the mirror runs one FtpClient per thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "ftp_adts/client/dataconn.h"
#include "ftp_adts/client/errors.h"
#include "ftp_adts/client/listing.h"
#include "ftp_adts/client/net.h"
#include "ftp_adts/ftp/protocol.h"
#include "ftp_adts/ftp/tls.h"

namespace tierce::adts {
class Session;
}

namespace tierce::ftpc {

// --adts: auto (TPRT TCP when offered) | off | tcp | ptcp:N | verbs.
struct AdtsChoice {
  enum class Mode { Auto, Off, Tcp, ParallelTcp, Verbs } mode = Mode::Auto;
  unsigned streams = 1;
};
std::optional<AdtsChoice> parse_adts_choice(std::string_view s);

struct ClientOptions {
  Millis timeout{30000};      // connect timeout, reply timeout, data "no progress" timeout
  AdtsChoice adts;
  bool tls = false;           // AUTH TLS + PROT P
  bool tls_insecure = false;  // accept any certificate
  bool verbose = false;       // the control dialogue on stderr (PASS masked)
  unsigned pipeline_window = 16;  // RETR/STOR commands in flight on an ADTS session
};

struct Login {
  std::string user = "anonymous";
  std::string password = "tierce-ftp@";
};

// One file of a batch: retr_many / stor_many report each with its outcome, in order.
struct BatchItem {
  std::string remote;
  int fd = -1;              // local file (opened by the caller)
  uint64_t offset = 0;      // REST offset (get) / source offset (put)
  uint64_t length = 0;      // put: bytes to send
  bool append = false;      // put: APPE instead of STOR
  // get with fd == -1: opens the local file only once the server has accepted the RETR (its
  // 150/125), so a refused RETR (55x) creates and truncates nothing. Returns the fd (still owned
  // by the caller), or why it could not: the transfer is then drained and reported as Exit::Local.
  std::function<base::Result<int>()> open_local = {};
};
struct BatchResult {
  bool ok = false;
  uint64_t bytes = 0;
  Exit code = Exit::Ok;     // when !ok
  std::string error;
};

class FtpClient {
 public:
  FtpClient(std::string host, uint16_t port, Login login, ClientOptions opts);
  ~FtpClient();  // QUIT, best effort
  FtpClient(const FtpClient&) = delete;
  FtpClient& operator=(const FtpClient&) = delete;

  // Connect, banner, TLS, login, FEAT, TYPE I, and TPRT + EPSV when ADTS is used. Throws
  // ClientError (Network, Login, Refused when an explicit --adts mode is not offered).
  void open();

  bool has_feature(const std::string& name) const;  // upper case, e.g. "MLST", "MFMT"
  bool adts_active() const { return adts_ != nullptr; }
  std::string data_path() const;  // "ADTS TCP", "ADTS PTCP 8", "plain (EPSV)", ...
  // A network failure left this client unusable (the mirror reconnects).
  bool broken() const { return broken_; }

  // One command, its final reply (1xx are not expected for these). Throws on network failure.
  ftp::Reply command(const std::string& line);

  std::string pwd();
  std::vector<RemoteEntry> list(const std::string& dir, std::vector<std::string>* rejected = nullptr);
  std::optional<uint64_t> size(const std::string& path);       // nullopt: 550 / not offered
  std::optional<std::time_t> mdtm(const std::string& path);    // nullopt: 550 / not offered
  void mkd(const std::string& path);                           // throws Refused
  void rmd(const std::string& path);
  void dele(const std::string& path);
  bool mfmt(const std::string& path, std::time_t t);           // false when not offered/refused
  // Is `path` a directory? (CWD there and back.) Used by `rm -r` and `ls` on a file.
  bool is_dir(const std::string& path);

  // Single transfers. retr writes it.remote to it.fd (or it.open_local()) at it.offset.. (the
  // REST offset when > 0).
  uint64_t retr(const BatchItem& it, uint64_t total_hint, const ProgressFn& p);
  uint64_t stor(const std::string& remote, int fd, uint64_t offset, uint64_t length, bool append,
                const ProgressFn& p);

  // Batches: per-file failures (550, an aborted transfer) are reported in `done` and the batch
  // goes on; a failure of the connection throws ClientError, and broken() is then true (items
  // not yet reported did not complete).
  using BatchDone = std::function<void(size_t index, const BatchResult&)>;
  void retr_many(const std::vector<BatchItem>& items, const BatchDone& done);
  void stor_many(const std::vector<BatchItem>& items, const BatchDone& done);

  const std::string& host() const { return host_; }
  uint16_t port() const { return port_; }

 private:
  struct Control;
  void send_lines(const std::string& lines);
  ftp::Reply read_reply();
  ftp::Reply read_final_reply();
  [[noreturn]] void fail_network(Exit code, const std::string& what);
  void login();
  void read_features();
  void setup_adts();
  // Plain path: EPSV/PASV + connect; the caller then sends the transfer command.
  Fd open_passive();
  // The host to connect a 227 reply's data connection to: always the control peer; a different
  // announced address is reported (once per connection) on stderr.
  std::string pasv_host(const std::string& announced);
  std::unique_ptr<PlainData> start_plain(const std::string& cmd, const std::string& rest_cmd,
                                         ftp::Reply* prelim);
  uint64_t finish_plain_reply(const std::string& what);
  BatchResult adts_retr_one(const BatchItem& it, bool rest_sent);
  // retr_many / stor_many without an ADTS session: `one` moves each item in turn; a ClientError
  // fails that item only, unless it broke the control connection (then it is rethrown).
  void each_serially(const std::vector<BatchItem>& items, const BatchDone& done,
                     const std::function<uint64_t(const BatchItem&)>& one);
  std::string list_raw(const std::string& cmd, bool* mlsd);
  std::string where() const;

  std::string host_;
  uint16_t port_;
  Login login_;
  ClientOptions opts_;
  std::unique_ptr<Control> ctl_;
  std::map<std::string, std::string> features_;
  std::shared_ptr<ftp::TlsContext> tls_ctx_;
  std::unique_ptr<adts::Session> adts_;
  std::string adts_desc_;
  bool epsv_refused_ = false;
  bool broken_ = false;
  std::string peer_;  // numeric address of the control peer
  bool pasv_warned_ = false;
  ProgressFn progress_;  // of the single transfer in flight (retr/stor), else empty
};

// The exit code for a refused reply: 530 -> Login, 421 -> Network, 425/426/451 -> Transfer,
// 55x and the rest -> Refused.
Exit exit_for_reply(int code);

}  // namespace tierce::ftpc
