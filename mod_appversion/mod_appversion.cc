// mod_appversion — the app tier's half of strong coherence (docs/ARCHITECTURE.md §4): thin httpd
// glue over coherence::ClusterClient. Runs in a prefork httpd beside mod_php.
//
//   header_parser  (per request, before the handler runs PHP, hence before PHP reads the DB)
//                  Tierce-Key on a GET: read the home's invalidation sequence (seq_start).
//                  header_parser rather than post_read_request because <Location>/<Directory>
//                  configuration (AppVersion On) is only merged by then; it still runs before
//                  access checks, fixups and the handler.
//   output filter  (first brigade: PHP has set its headers by then, nothing has left yet)
//                  invalidate (wait for every home's ack), register the page and tag it,
//                  strip the protocol headers, remove itself.
//   appversion-status handler: the counters, shared by all children.
//
// The pure parts (directive arguments, header selection, decisions) are in logic.h.
// clang-format off: httpd.h must come first
#include <httpd.h>
#include <http_config.h>
#include <http_core.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_request.h>
#include <util_filter.h>
#include <apr_shm.h>
#include <apr_strings.h>
// clang-format on

#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "coherence/client.h"
#include "coherence/key.h"
#include "coherence/protocol.h"
#include "coherence/topology.h"
#include "mod_appversion/logic.h"

extern "C" __attribute__((visibility("default"))) module AP_MODULE_DECLARE_DATA appversion_module;
APLOG_USE_MODULE(appversion);

namespace av = tierce::appversion;
namespace co = tierce::coherence;
namespace fab = tierce::fabric;

namespace {

constexpr uint32_t kDefaultAckTimeoutMs = 2000;
constexpr uint32_t kDefaultOpTimeoutMs = 200;
constexpr const char* kFilterName = "APPVERSION";
constexpr const char* kStatusHandler = "appversion-status";

// ---- configuration ---------------------------------------------------------------------------

struct ServerConf {
  const char* topology_path = nullptr;  // absolute
  co::Topology* topology = nullptr;     // loaded by the directive (owned by the config pool)
  const char* node = nullptr;
  const char* node_file = nullptr;      // where AppVersionNode was written (for messages)
  int node_line = 0;
  uint32_t op_timeout_ms = kDefaultOpTimeoutMs;
};

struct DirConf {
  int enabled = -1;                          // -1 unset
  int scheme = -1;                           // -1 unset, else co::Scheme
  apr_array_header_t* dep_headers = nullptr; // const char*; nullptr = unset
  int64_t ack_timeout_ms = -1;               // -1 unset
};

// What the parent prepared in post_config (as root), inherited by the children.
struct Runtime {
  co::Topology topology;
  fab::Secret secret;
  std::string node;
  co::ClientTuning tuning;
};

Runtime* g_runtime = nullptr;          // parent: rebuilt on every (re)start
co::ClusterClient* g_client = nullptr; // child: built in child_init
av::Counters* g_counters = nullptr;    // shared memory (or a per-process fallback)
av::Counters g_local_counters;         // the fallback
bool g_any_enabled = false;            // "AppVersion On" appears somewhere
ap_filter_rec_t* g_filter = nullptr;
server_rec* g_main_server = nullptr;

av::Counters& counters() { return g_counters ? *g_counters : g_local_counters; }

template <class T>
apr_status_t delete_cleanup(void* p) {
  delete static_cast<T*>(p);
  return APR_SUCCESS;
}

void* create_server_conf(apr_pool_t* p, server_rec*) {
  void* mem = apr_pcalloc(p, sizeof(ServerConf));
  return new (mem) ServerConf();
}

void* create_dir_conf(apr_pool_t* p, char*) {
  void* mem = apr_pcalloc(p, sizeof(DirConf));
  return new (mem) DirConf();
}

void* merge_dir_conf(apr_pool_t* p, void* basev, void* addv) {
  auto* base = static_cast<DirConf*>(basev);
  auto* add = static_cast<DirConf*>(addv);
  auto* out = static_cast<DirConf*>(create_dir_conf(p, nullptr));
  out->enabled = add->enabled != -1 ? add->enabled : base->enabled;
  out->scheme = add->scheme != -1 ? add->scheme : base->scheme;
  out->dep_headers = add->dep_headers ? add->dep_headers : base->dep_headers;
  out->ack_timeout_ms = add->ack_timeout_ms != -1 ? add->ack_timeout_ms : base->ack_timeout_ms;
  return out;
}

ServerConf* server_conf(server_rec* s) {
  return static_cast<ServerConf*>(ap_get_module_config(s->module_config, &appversion_module));
}
DirConf* dir_conf(request_rec* r) {
  return static_cast<DirConf*>(ap_get_module_config(r->per_dir_config, &appversion_module));
}

co::Scheme scheme_of(const DirConf* dc) {
  return dc->scheme == -1 ? co::Scheme::DependencyLists : static_cast<co::Scheme>(dc->scheme);
}
uint32_t ack_timeout_of(const DirConf* dc) {
  return dc->ack_timeout_ms == -1 ? kDefaultAckTimeoutMs : static_cast<uint32_t>(dc->ack_timeout_ms);
}
std::vector<std::string> dep_headers_of(const DirConf* dc) {
  if (!dc->dep_headers) return {av::kDependsHeader};
  std::vector<std::string> out;
  for (int i = 0; i < dc->dep_headers->nelts; ++i)
    out.emplace_back(APR_ARRAY_IDX(dc->dep_headers, i, const char*));
  return out;
}

const char* err(cmd_parms* cmd, const std::string& why) {
  return apr_psprintf(cmd->pool, "%s: %s", cmd->cmd->name, why.c_str());
}

// Whichever of AppVersionTopology / AppVersionNode comes second checks the node, so that
// `apache2ctl -t` already reports an unknown node or a proxy node.
const char* check_node_in_topology(cmd_parms* cmd, ServerConf* sc) {
  if (!sc->topology || !sc->node) return nullptr;
  const co::NodeInfo* n = sc->topology->find(sc->node);
  if (!n)
    return err(cmd, std::string("node '") + sc->node + "' is not in the topology " +
                        sc->topology_path + "; name one of its [[node]] entries with role = \"app\"");
  if (n->role != co::Role::App)
    return err(cmd, std::string("node '") + sc->node + "' has role proxy in " + sc->topology_path +
                        "; mod_appversion runs on an app node (role = \"app\")");
  return nullptr;
}

const char* cmd_enabled(cmd_parms* cmd, void* dcv, int on) {
  static_cast<DirConf*>(dcv)->enabled = on ? 1 : 0;
  if (on) g_any_enabled = true;
  (void)cmd;
  return nullptr;
}

const char* cmd_topology(cmd_parms* cmd, void*, const char* arg) {
  if (const char* e = ap_check_cmd_context(cmd, GLOBAL_ONLY)) return e;
  ServerConf* sc = server_conf(cmd->server);
  const char* path = ap_server_root_relative(cmd->pool, arg);
  if (!path) return err(cmd, std::string("invalid path '") + arg + "'");
  try {
    auto* topo = new co::Topology(co::Topology::load(path));
    apr_pool_cleanup_register(cmd->pool, topo, delete_cleanup<co::Topology>,
                              apr_pool_cleanup_null);
    if (topo->app_nodes().empty())
      return err(cmd, std::string(path) + " names no node with role = \"app\"");
    sc->topology = topo;
  } catch (const std::exception& e) {
    return err(cmd, std::string("cannot load the topology ") + path + ": " + e.what());
  }
  sc->topology_path = path;
  return check_node_in_topology(cmd, sc);
}

const char* cmd_node(cmd_parms* cmd, void*, const char* arg) {
  if (const char* e = ap_check_cmd_context(cmd, GLOBAL_ONLY)) return e;
  std::string why = av::check_node_name(arg);
  if (!why.empty()) return err(cmd, why);
  ServerConf* sc = server_conf(cmd->server);
  sc->node = arg;
  return check_node_in_topology(cmd, sc);
}

const char* cmd_scheme(cmd_parms* cmd, void* dcv, const char* arg) {
  co::Scheme s{};
  std::string why = av::parse_scheme(arg, s);
  if (!why.empty()) return err(cmd, why);
  static_cast<DirConf*>(dcv)->scheme = static_cast<int>(s);
  return nullptr;
}

const char* cmd_dep_headers(cmd_parms* cmd, void* dcv, const char* args) {
  std::vector<std::string> names;
  std::string why = av::parse_header_names(args ? args : "", names);
  if (!why.empty()) return err(cmd, why);
  auto* arr = apr_array_make(cmd->pool, static_cast<int>(names.size()), sizeof(const char*));
  for (const auto& n : names) APR_ARRAY_PUSH(arr, const char*) = apr_pstrdup(cmd->pool, n.c_str());
  static_cast<DirConf*>(dcv)->dep_headers = arr;
  return nullptr;
}

const char* cmd_ack_timeout(cmd_parms* cmd, void* dcv, const char* arg) {
  uint32_t ms = 0;
  std::string why = av::parse_millis(arg, 1, 60000, ms);
  if (!why.empty()) return err(cmd, why);
  static_cast<DirConf*>(dcv)->ack_timeout_ms = ms;
  return nullptr;
}

const char* cmd_op_timeout(cmd_parms* cmd, void*, const char* arg) {
  if (const char* e = ap_check_cmd_context(cmd, GLOBAL_ONLY)) return e;
  uint32_t ms = 0;
  std::string why = av::parse_millis(arg, 1, 10000, ms);
  if (!why.empty()) return err(cmd, why);
  server_conf(cmd->server)->op_timeout_ms = ms;
  return nullptr;
}

// httpd's cmd_func is `const char* (*)()` for C++; go through void(*)() so that
// -Wcast-function-type stays quiet (httpd calls each with the arguments its kind implies).
template <class F>
cmd_func as_cmd(F f) {
  return reinterpret_cast<cmd_func>(reinterpret_cast<void (*)()>(f));
}

const command_rec kCommands[] = {
    AP_INIT_FLAG("AppVersion", as_cmd(cmd_enabled), nullptr,
                 RSRC_CONF | ACCESS_CONF,
                 "On: coherence for the pages here (register Tierce-Key'd GETs, send "
                 "invalidations, strip protocol headers). Default Off"),
    AP_INIT_TAKE1("AppVersionTopology", as_cmd(cmd_topology), nullptr,
                  RSRC_CONF, "the cluster topology file (coherence/topology.h format)"),
    AP_INIT_TAKE1("AppVersionNode", as_cmd(cmd_node), nullptr, RSRC_CONF,
                  "this app node's name in the topology (role app)"),
    AP_INIT_TAKE1("AppVersionScheme", as_cmd(cmd_scheme), nullptr,
                  RSRC_CONF | ACCESS_CONF,
                  "dependency-lists (default) or invalidate-all"),
    AP_INIT_RAW_ARGS("AppVersionDependencyHeaders", as_cmd(cmd_dep_headers),
                     nullptr, RSRC_CONF | ACCESS_CONF,
                     "response headers listing a page's dependencies (default Tierce-Depends)"),
    AP_INIT_TAKE1("AppVersionAckTimeout", as_cmd(cmd_ack_timeout), nullptr,
                  RSRC_CONF | ACCESS_CONF,
                  "ms an update's response waits for every home's ack (default 2000)"),
    AP_INIT_TAKE1("AppVersionOpTimeout", as_cmd(cmd_op_timeout), nullptr,
                  RSRC_CONF, "ms for one sequence read or registration call (default 200)"),
    {nullptr, {}, nullptr, 0, RAW_ARGS, nullptr},
};

// ---- lifecycle -------------------------------------------------------------------------------

int pre_config(apr_pool_t*, apr_pool_t*, apr_pool_t*) {
  g_any_enabled = false;
  return OK;
}

apr_status_t drop_runtime(void*) {
  delete g_runtime;
  g_runtime = nullptr;
  return APR_SUCCESS;
}

void create_counters(apr_pool_t* pconf, server_rec* s) {
  g_counters = nullptr;
  apr_shm_t* shm = nullptr;
  apr_status_t rv = apr_shm_create(&shm, sizeof(av::Counters), nullptr, pconf);
  if (rv != APR_SUCCESS) {
    ap_log_error(APLOG_MARK, APLOG_WARNING, rv, s,
                 "APPVER0016 cannot create anonymous shared memory for the counters; each child "
                 "counts on its own (the status page shows one child's numbers)");
    return;
  }
  g_counters = new (apr_shm_baseaddr_get(shm)) av::Counters();
}

int post_config(apr_pool_t* pconf, apr_pool_t*, apr_pool_t*, server_rec* s) {
  g_main_server = s;
  create_counters(pconf, s);
  ServerConf* sc = server_conf(s);
  if (!sc->topology_path && !sc->node) {
    if (g_any_enabled) {
      ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s,
                   "APPVER0004 AppVersion On is set but AppVersionTopology and AppVersionNode are "
                   "not: add both to the main server configuration");
      return HTTP_INTERNAL_SERVER_ERROR;
    }
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, s,
                 "APPVER0017 mod_appversion loaded but not configured (no AppVersionTopology)");
    return OK;
  }
  if (!sc->topology_path || !sc->node) {
    ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s,
                 "APPVER0004 AppVersion%s is missing: mod_appversion needs both "
                 "AppVersionTopology and AppVersionNode in the main server configuration",
                 sc->node ? "Topology" : "Node");
    return HTTP_INTERNAL_SERVER_ERROR;
  }
  auto rt = std::make_unique<Runtime>();
  try {
    // Loaded again: the file may have changed since the directive read it (graceful restart).
    rt->topology = co::Topology::load(sc->topology_path);
    rt->topology.require_app_nodes();
  } catch (const std::exception& e) {
    ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "APPVER0001 cannot load the topology %s: %s",
                 sc->topology_path, e.what());
    return HTTP_INTERNAL_SERVER_ERROR;
  }
  const co::NodeInfo* self = rt->topology.find(sc->node);
  if (!self || self->role != co::Role::App) {
    ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s,
                 "APPVER0002 AppVersionNode %s: %s in %s; name a [[node]] with role = \"app\"",
                 sc->node, self ? "has role proxy" : "is not a node", sc->topology_path);
    return HTTP_INTERNAL_SERVER_ERROR;
  }
  try {
    for (const co::NodeInfo* n : rt->topology.app_nodes()) (void)rt->topology.uri_of(*n);
  } catch (const std::exception& e) {
    ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s,
                 "APPVER0001 topology %s: %s (every app node needs a memd URI of the cluster's "
                 "transport)",
                 sc->topology_path, e.what());
    return HTTP_INTERNAL_SERVER_ERROR;
  }
  try {
    // Read here, as root, before the children drop privileges: they keep it in memory.
    rt->secret = rt->topology.secret();
  } catch (const std::exception& e) {
    ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s,
                 "APPVER0003 cannot read the cluster secret %s named by %s: %s (it must exist, "
                 "hold >= 16 bytes and not be readable by others: chmod 600, owner root)",
                 rt->topology.secret_file.c_str(), sc->topology_path, e.what());
    return HTTP_INTERNAL_SERVER_ERROR;
  }
  rt->node = sc->node;
  rt->tuning.op_timeout = std::chrono::milliseconds(sc->op_timeout_ms);
  rt->tuning.connect_timeout = std::chrono::milliseconds(std::max<uint32_t>(sc->op_timeout_ms, 200));
  delete g_runtime;
  g_runtime = rt.release();
  apr_pool_cleanup_register(pconf, nullptr, drop_runtime, apr_pool_cleanup_null);
  // (httpd's formatter knows neither %zu nor %llu: numbers go through std::to_string)
  std::string msg = "APPVER0018 node " + g_runtime->node + " of cluster " +
                    g_runtime->topology.name + ": " +
                    std::to_string(g_runtime->topology.app_nodes().size()) + " app nodes, " +
                    std::to_string(g_runtime->topology.version_slots) + " version slots, op timeout " +
                    std::to_string(sc->op_timeout_ms) + " ms";
  ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "%s", msg.c_str());
  return OK;
}

apr_status_t drop_client(void*) {
  delete g_client;
  g_client = nullptr;
  return APR_SUCCESS;
}

void child_init(apr_pool_t* pchild, server_rec* s) {
  if (!g_runtime) return;
  fab::LogSink sink = [s](fab::LogLevel level, std::string_view line) {
    int l = APLOG_ERR;
    switch (level) {
      case fab::LogLevel::Debug: l = APLOG_DEBUG; break;
      case fab::LogLevel::Info: l = APLOG_INFO; break;
      case fab::LogLevel::Warn: l = APLOG_WARNING; break;
      case fab::LogLevel::Error: l = APLOG_ERR; break;
    }
    ap_log_error(APLOG_MARK, l, 0, s, "%.*s", static_cast<int>(line.size()), line.data());
  };
  try {
    g_client = new co::ClusterClient(g_runtime->topology, g_runtime->secret, g_runtime->tuning,
                                     std::move(sink));
    apr_pool_cleanup_register(pchild, nullptr, drop_client, apr_pool_cleanup_null);
  } catch (const std::exception& e) {
    ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s,
                 "APPVER0005 this child cannot create its cluster client: %s; its pages are not "
                 "cacheable and its invalidations are NOT sent until httpd is restarted",
                 e.what());
  }
}

// ---- per request -----------------------------------------------------------------------------

struct RequestState {
  bool has_key;
  bool is_get;
  bool seq_read;
  uint64_t key;
  uint64_t slot;
  uint64_t seq_start;
  const char* home;
};

RequestState* state_of(request_rec* r) {
  return static_cast<RequestState*>(ap_get_module_config(r->request_config, &appversion_module));
}

bool enabled(request_rec* r) {
  DirConf* dc = dir_conf(r);
  return dc && dc->enabled == 1;
}

int header_parser(request_rec* r) {
  if (r->main || !enabled(r)) return DECLINED;
  if (r->prev) {  // internal redirect: keep what the original request read (it is older: safe)
    for (request_rec* p = r->prev; p; p = p->prev)
      if (RequestState* st = state_of(p)) {
        ap_set_module_config(r->request_config, &appversion_module, st);
        return DECLINED;
      }
  }
  const char* kh = apr_table_get(r->headers_in, av::kKeyHeader);
  if (!kh) return DECLINED;
  auto* st = static_cast<RequestState*>(apr_pcalloc(r->pool, sizeof(RequestState)));
  ap_set_module_config(r->request_config, &appversion_module, st);
  auto key = av::parse_key_header(kh);
  if (!key) {
    counters().bad_keys.fetch_add(1, std::memory_order_relaxed);
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r,
                  "APPVER0010 malformed Tierce-Key '%.64s' (16 hex digits expected): page not "
                  "registered; check the proxy tier's mod_rcache version",
                  kh);
    return DECLINED;
  }
  counters().requests_keyed.fetch_add(1, std::memory_order_relaxed);
  st->has_key = true;
  st->key = *key;
  st->is_get = r->method_number == M_GET && !r->header_only;
  if (!st->is_get) return DECLINED;
  if (!g_client) {
    counters().seq_failures.fetch_add(1, std::memory_order_relaxed);
    return DECLINED;
  }
  try {
    const co::Topology& topo = g_client->topology();
    const co::NodeInfo& home = topo.home_of(st->key);
    st->home = apr_pstrdup(r->pool, home.name.c_str());
    st->slot = co::slot_of(st->key, topo.version_slots);
    if (auto seq = g_client->read_seq(home.name)) {
      st->seq_read = true;
      st->seq_start = *seq;
    } else {
      counters().seq_failures.fetch_add(1, std::memory_order_relaxed);
      ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r,
                    "APPVER0006 cannot read the invalidation sequence of home %s: this page is "
                    "not cacheable (is %s's memd running and reachable?)",
                    home.name.c_str(), home.name.c_str());
    }
  } catch (const std::exception& e) {
    counters().seq_failures.fetch_add(1, std::memory_order_relaxed);
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                  "APPVER0013 sequence read failed: %s; page not cacheable", e.what());
  }
  return DECLINED;
}

void insert_filter(request_rec* r) {
  if (r->main || !enabled(r)) return;
  ap_add_output_filter_handle(g_filter, nullptr, r, r->connection);
}

struct HeaderView {
  av::HeaderList list;
};
int collect_header(void* rec, const char* key, const char* value) {
  static_cast<HeaderView*>(rec)->list.emplace_back(key, value ? value : "");
  return 1;
}

std::string missing_list(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& m : v) s += (s.empty() ? "" : ", ") + m;
  return s;
}

struct PendingDiagnosis {
  request_rec* r;
};

apr_status_t diagnose_silent_homes(void* p) {
  request_rec* r = static_cast<PendingDiagnosis*>(p)->r;
  if (!g_client) return APR_SUCCESS;
  try {
    std::string silent;
    for (const co::NodeInfo* n : g_client->topology().app_nodes())
      if (!g_client->read_seq(n->name)) silent += (silent.empty() ? "" : ", ") + n->name;
    std::string msg = "APPVER0020 after the incomplete invalidation (APPVER0007) of " +
                      std::string(r->method) + " " + r->uri + ", homes not answering: " +
                      (silent.empty() ? "none (they were slow, not gone)" : silent);
    ap_log_error(APLOG_MARK, APLOG_ERR, 0, r->server, "%s", msg.c_str());
  } catch (const std::exception&) {
  }
  return APR_SUCCESS;
}

void invalidate(request_rec* r, DirConf* dc, const std::string& list) {
  co::Scheme scheme = scheme_of(dc);
  std::vector<uint64_t> deps;
  if (scheme == co::Scheme::DependencyLists) {
    try {
      deps = co::parse_dependencies(list);
    } catch (const std::exception& e) {
      counters().bad_dependency_lists.fetch_add(1, std::memory_order_relaxed);
      ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                    "APPVER0012 malformed invalidation list (%s): invalidating EVERYTHING "
                    "instead (fix the Tierce-Invalidate header / tierce-invalidate note)",
                    e.what());
      scheme = co::Scheme::InvalidateAll;
    }
    if (scheme == co::Scheme::DependencyLists && deps.empty()) {
      ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r,
                    "APPVER0019 empty invalidation list: nothing to invalidate");
      return;
    }
  }
  counters().invalidations.fetch_add(1, std::memory_order_relaxed);
  if (!g_client) {
    counters().invalidations_incomplete.fetch_add(1, std::memory_order_relaxed);
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                  "APPVER0014 invalidation NOT sent: this child has no cluster client (see "
                  "APPVER0005 at its start); proxies may serve stale pages for it: restart httpd");
    return;
  }
  uint32_t ack_ms = ack_timeout_of(dc);
  co::InvalidateOutcome o = g_client->invalidate(g_runtime->node, deps, scheme,
                                                 std::chrono::milliseconds(ack_ms));
  uint64_t us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(o.elapsed).count());
  counters().record_wait(us);
  counters().acks_received.fetch_add(o.acked, std::memory_order_relaxed);
  counters().acks_missing.fetch_add(o.homes - o.acked, std::memory_order_relaxed);
  std::string what = "invalidation (" + std::string(co::to_string(scheme)) + ", " +
                     std::to_string(deps.size()) + " dependencies)";
  if (!o.complete()) {
    counters().invalidations_incomplete.fetch_add(1, std::memory_order_relaxed);
    std::string msg = "APPVER0007 " + what + " acknowledged by " + std::to_string(o.acked) +
                      " of " + std::to_string(o.homes) + " homes within " +
                      std::to_string(ack_ms) + " ms; missing: " + missing_list(o.missing) +
                      ". Those homes are unreachable from here: if their memd is down, their "
                      "proxies cannot read versions and fail closed (no stale page); if only the "
                      "path from this node is broken, proxies reaching them may serve pages "
                      "older than this update: check those homes' memd and network now";
    // Acks are counted, not named: once the response is gone (request pool cleanup), ask every
    // home for its sequence and log which ones do not answer (APPVER0020).
    auto* d = static_cast<PendingDiagnosis*>(apr_pcalloc(r->pool, sizeof(PendingDiagnosis)));
    d->r = r;
    apr_pool_cleanup_register(r->pool, d, diagnose_silent_homes, apr_pool_cleanup_null);
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "%s", msg.c_str());
  } else {
    std::string msg = "APPVER0008 " + what + " acknowledged by all " + std::to_string(o.homes) +
                      " homes in " + std::to_string(us) + " us";
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "%s", msg.c_str());
  }
}

// Returns true when the page was registered and tagged.
bool register_page(request_rec* r, DirConf* dc, RequestState* st, bool deps_found,
                   const std::string& list) {
  av::PageFacts f;
  f.has_key = st && st->has_key;
  f.is_get = st && st->is_get;
  f.status = r->status;
  f.seq_read = st && st->seq_read;
  f.deps_found = deps_found;
  f.scheme = scheme_of(dc);
  std::vector<uint64_t> deps;
  if (f.has_key && deps_found) {
    try {
      deps = co::parse_dependencies(list);
    } catch (const std::exception& e) {
      f.deps_valid = false;
      counters().bad_dependency_lists.fetch_add(1, std::memory_order_relaxed);
      ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r,
                    "APPVER0011 malformed dependency list (%s): page not cacheable", e.what());
    }
  }
  av::Decision d = av::decide_registration(f);
  if (d == av::Decision::NoKey) return false;
  if (d != av::Decision::Register) {
    counters().not_registered.fetch_add(1, std::memory_order_relaxed);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "APPVER0009 page not registered: %s",
                  std::string(av::to_string(d)).c_str());
    return false;
  }
  if (!g_client) return false;
  co::RegisterResult res = g_client->register_page(st->home, st->key, st->slot, st->seq_start, deps);
  if (!res.cacheable) {
    switch (av::classify_refusal(res.reason)) {
      case av::Refusal::Race: counters().refused_race.fetch_add(1, std::memory_order_relaxed); break;
      case av::Refusal::Log: counters().refused_log.fetch_add(1, std::memory_order_relaxed); break;
      default: counters().refused_other.fetch_add(1, std::memory_order_relaxed); break;
    }
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r,
                  "APPVER0009 page not cacheable: home %s refused the registration: %s", st->home,
                  res.reason.c_str());
    return false;
  }
  counters().registrations.fetch_add(1, std::memory_order_relaxed);
  apr_table_setn(r->headers_out, av::kTagHeader,
                 apr_pstrdup(r->pool, av::format_tag(st->home, st->slot, res.version).c_str()));
  return true;
}

// What the filter saw on its first brigade, compared again at the end of the response.
struct FilterCtx {
  const char* inv_note;  // r->notes tierce-invalidate then (nullptr: unset)
  const char* dep_note;  // r->notes tierce-depends then
  const char* tagged_deps;  // the dependency list the page was registered with (nullptr: not)
};

const char* note_copy(request_rec* r, const char* name) {
  const char* v = apr_table_get(r->notes, name);
  return v ? apr_pstrdup(r->pool, v) : nullptr;
}

bool same(const char* a, const char* b) {
  return (!a && !b) || (a && b && std::strcmp(a, b) == 0);
}

void process_response(request_rec* r, FilterCtx* ctx) {
  DirConf* dc = dir_conf(r);
  HeaderView hv;
  apr_table_do(collect_header, &hv, r->headers_out, nullptr);
  apr_table_do(collect_header, &hv, r->err_headers_out, nullptr);
  ctx->inv_note = note_copy(r, av::kInvalidateNote);
  ctx->dep_note = note_copy(r, av::kDependsNote);

  // a. invalidation: the app has committed (its headers are out of its hands now)
  bool inv_found = false;
  std::string inv = av::collect_values(hv.list, {av::kInvalidateHeader}, &inv_found);
  if (inv_found || ctx->inv_note)
    invalidate(r, dc, av::join_lists(inv, ctx->inv_note ? ctx->inv_note : ""));

  // b. registration
  std::vector<std::string> dep_headers = dep_headers_of(dc);
  bool deps_found = false;
  std::string deps = av::collect_values(hv.list, dep_headers, &deps_found);
  if (ctx->dep_note) deps_found = true;
  deps = av::join_lists(deps, ctx->dep_note ? ctx->dep_note : "");

  // c. no protocol header reaches the client (a Tierce-Tag set by the app is dropped too)
  for (const std::string& h : av::headers_to_strip(dep_headers)) {
    apr_table_unset(r->headers_out, h.c_str());
    apr_table_unset(r->err_headers_out, h.c_str());
  }
  if (register_page(r, dc, state_of(r), deps_found, deps))
    ctx->tagged_deps = apr_pstrdup(r->pool, deps.c_str());
}

// At the end of the response (EOS, before it is passed on: the client has not got the whole
// response yet). PHP may call apache_note() after its first output was flushed:
//  - a later tierce-invalidate note is still sent (and waited for) here;
//  - a later tierce-depends note comes too late for the tag already sent: the page's
//    registered dependencies are invalidated, so the tag the proxy got is stale at once.
void finish_response(request_rec* r, FilterCtx* ctx) {
  DirConf* dc = dir_conf(r);
  const char* inv_note = apr_table_get(r->notes, av::kInvalidateNote);
  if (inv_note && !same(inv_note, ctx->inv_note)) {
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r,
                  "APPVER0022 tierce-invalidate note set after the first output: sent at the end "
                  "of the response");
    invalidate(r, dc, inv_note);
  }
  const char* dep_note = apr_table_get(r->notes, av::kDependsNote);
  if (ctx->tagged_deps && !same(dep_note, ctx->dep_note)) {
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r,
                  "APPVER0021 tierce-depends note set after the page's headers were sent: the "
                  "tag is withdrawn (its dependencies are invalidated); call apache_note() before "
                  "any output, or buffer the page with ob_start()");
    invalidate(r, dc, ctx->tagged_deps);
  }
}

apr_status_t output_filter(ap_filter_t* f, apr_bucket_brigade* bb) {
  request_rec* r = f->r;
  auto* ctx = static_cast<FilterCtx*>(f->ctx);
  if (!ctx) {
    ctx = static_cast<FilterCtx*>(apr_pcalloc(r->pool, sizeof(FilterCtx)));
    f->ctx = ctx;
    try {
      process_response(r, ctx);
    } catch (const std::exception& e) {
      ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                    "APPVER0013 response processing failed: %s; page not tagged", e.what());
      apr_table_unset(r->headers_out, av::kTagHeader);
    }
  }
  for (apr_bucket* b = APR_BRIGADE_FIRST(bb); b != APR_BRIGADE_SENTINEL(bb); b = APR_BUCKET_NEXT(b)) {
    if (!APR_BUCKET_IS_EOS(b)) continue;
    try {
      finish_response(r, ctx);
    } catch (const std::exception& e) {
      ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                    "APPVER0013 end-of-response processing failed: %s", e.what());
    }
    ap_remove_output_filter(f);
    break;
  }
  return ap_pass_brigade(f->next, bb);
}

int status_handler(request_rec* r) {
  if (!r->handler || std::strcmp(r->handler, kStatusHandler) != 0) return DECLINED;
  if (r->method_number != M_GET) return HTTP_METHOD_NOT_ALLOWED;
  ap_set_content_type(r, "text/plain; charset=utf-8");
  if (r->header_only) return OK;
  std::string body = counters().text();
  body += std::string("shared_counters ") + (g_counters ? "1" : "0") + "\n";
  if (g_runtime) {
    body += "node " + g_runtime->node + "\n";
    body += "cluster " + g_runtime->topology.name + "\n";
  }
  body += std::string("client ") + (g_client ? "1" : "0") + "\n";
  ap_rwrite(body.data(), static_cast<int>(body.size()), r);
  return OK;
}

void register_hooks(apr_pool_t*) {
  ap_hook_pre_config(pre_config, nullptr, nullptr, APR_HOOK_MIDDLE);
  ap_hook_post_config(post_config, nullptr, nullptr, APR_HOOK_MIDDLE);
  ap_hook_child_init(child_init, nullptr, nullptr, APR_HOOK_MIDDLE);
  ap_hook_header_parser(header_parser, nullptr, nullptr, APR_HOOK_MIDDLE);
  ap_hook_insert_filter(insert_filter, nullptr, nullptr, APR_HOOK_MIDDLE);
  ap_hook_handler(status_handler, nullptr, nullptr, APR_HOOK_MIDDLE);
  g_filter = ap_register_output_filter(kFilterName, output_filter, nullptr, AP_FTYPE_CONTENT_SET);
}

}  // namespace

// The module is built with hidden visibility: its one exported symbol is marked explicitly.
extern "C" {
__attribute__((visibility("default"))) module AP_MODULE_DECLARE_DATA appversion_module = {
    STANDARD20_MODULE_STUFF,
    create_dir_conf,
    merge_dir_conf,
    create_server_conf,
    nullptr,
    kCommands,
    register_hooks,
    AP_MODULE_FLAG_NONE,
};
}  // extern "C"
