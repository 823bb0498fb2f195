// mod_appversion — the app tier's half of strong coherence (docs/ARCHITECTURE.md §4): thin httpd
// glue over coherence::ClusterClient. Runs in a prefork httpd beside mod_php.
//
//   header_parser  (per request, before the handler runs PHP, hence before PHP reads the DB)
//                  Tierce-Key on a GET: read the home's invalidation sequence (seq_start).
//                  header_parser rather than post_read_request because <Location>/<Directory>
//                  configuration (AppVersion On) is only merged by then; it still runs before
//                  access checks, fixups and the handler.
//   output filter  (first brigade: PHP has set its headers by then, nothing has left yet)
//                  invalidate (wait until every home acknowledged, or the fence bound passed),
//                  register the page and tag it, strip the protocol headers; at the end of the
//                  response (EOS): invalidate again when the script may have committed after its
//                  first output, withdraw the tag of a page whose script aborted, remove itself.
//   error_log      notes a PHP abort (fatal error, uncaught exception) logged for a request.
//   appversion-status handler: the counters, shared by all children.
//
// With AppVersionAgent (docs/coherence.md "The agent socket") the children hold no fabric
// credential and do not map the node's writer counter: reads, registrations and invalidations go
// through the node's writer agent (coherence/agent_client.h). Without it, each child holds the
// cluster secret and numbers in the counter itself (logged as a warning at start: PHP runs here).
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

#include "coherence/agent_client.h"
#include "coherence/client.h"
#include "coherence/key.h"
#include "coherence/layout.h"
#include "coherence/protocol.h"
#include "coherence/topology.h"
#include "coherence/writer.h"
#include "mod_appversion/logic.h"

extern "C" __attribute__((visibility("default"))) module AP_MODULE_DECLARE_DATA appversion_module;
APLOG_USE_MODULE(appversion);

namespace av = tierce::appversion;
namespace co = tierce::coherence;
namespace fab = tierce::fabric;
namespace base = tierce::base;

namespace {

constexpr const char* kAbortNote = "tierce-php-aborted";  // r->notes, set by error_log_hook
constexpr const char* kFilterName = "APPVERSION";
constexpr const char* kStatusHandler = "appversion-status";
constexpr const char* kMetricsHandler = "appversion-metrics";

// ---- configuration ---------------------------------------------------------------------------

struct ServerConf {
  const char* topology_path = nullptr;  // absolute
  co::Topology* topology = nullptr;     // loaded by the directive (owned by the config pool)
  const char* node = nullptr;
  uint32_t op_timeout_ms = av::kDefaultOpTimeoutMs;
  const char* agent_socket = nullptr;  // absolute
  const char* node_key = nullptr;      // absolute
};

using DirConf = av::DirSettings;  // AppVersion, AppVersionDependencyHeaders

// Values that must agree with the topology, wherever they were written (checked in post_config:
// one scheme per cluster; no update may return before the fence bound).
std::vector<av::SeenValue> g_schemes_seen;
std::vector<av::SeenValue> g_ack_timeouts_seen;

// What the parent prepared in post_config (as root), inherited by the children.
struct Runtime {
  co::Topology topology;
  std::string agent_socket;  // AppVersionAgent: then no secret, no writer
  co::AgentTimeouts agent_timeouts;
  fab::Secret secret;
  fab::NodeKey node_key;  // without the agent, in a keyed cluster
  std::string node;
  co::ClientTuning tuning;
  std::unique_ptr<co::WriterLog> writer;  // this node's invalidation counter (writer.h)
};

Runtime* g_runtime = nullptr;          // parent: rebuilt on every (re)start
co::ClusterClient* g_client = nullptr; // child: built in child_init (without AppVersionAgent)
co::AgentClient* g_agent = nullptr;     // child: built in child_init (with AppVersionAgent)
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
template <class T>
apr_status_t destroy_in_pool(void* p) {
  static_cast<T*>(p)->~T();
  return APR_SUCCESS;
}
// A T in `pool`, destroyed with it.
template <class T>
T* pool_new(apr_pool_t* pool, T value = T()) {
  T* t = new (apr_palloc(pool, sizeof(T))) T(std::move(value));
  apr_pool_cleanup_register(pool, t, destroy_in_pool<T>, apr_pool_cleanup_null);
  return t;
}

void* create_server_conf(apr_pool_t* p, server_rec*) {
  void* mem = apr_pcalloc(p, sizeof(ServerConf));
  return new (mem) ServerConf();
}

void* create_dir_conf(apr_pool_t* p, char*) { return pool_new<DirConf>(p); }

void* merge_dir_conf(apr_pool_t* p, void* basev, void* addv) {
  return pool_new(p, av::merge_dir(*static_cast<DirConf*>(basev), *static_cast<DirConf*>(addv)));
}

ServerConf* server_conf(server_rec* s) {
  return static_cast<ServerConf*>(ap_get_module_config(s->module_config, &appversion_module));
}
DirConf* dir_conf(request_rec* r) {
  return static_cast<DirConf*>(ap_get_module_config(r->per_dir_config, &appversion_module));
}

// One scheme per cluster: the topology's ([coherence] scheme).
co::Scheme cluster_scheme() {
  return g_runtime ? g_runtime->topology.coherence.scheme : co::Scheme::DependencyLists;
}
std::string where_of(cmd_parms* cmd) {
  if (!cmd->directive) return "?";
  return std::string(cmd->directive->filename ? cmd->directive->filename : "?") + ":" +
         std::to_string(cmd->directive->line_num);
}

const char* err(cmd_parms* cmd, const std::string& why) {
  return apr_psprintf(cmd->pool, "%s: %s", cmd->cmd->name, why.c_str());
}

// Whichever of AppVersionTopology / AppVersionNode comes second checks the node, so that
// `apache2ctl -t` already reports an unknown node or a proxy node.
const char* check_node_in_topology(cmd_parms* cmd, ServerConf* sc) {
  if (!sc->topology || !sc->node) return nullptr;
  std::string why = av::check_node_in_topology(*sc->topology, sc->topology_path, sc->node);
  return why.empty() ? nullptr : err(cmd, why);
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

const char* cmd_scheme(cmd_parms* cmd, void*, const char* arg) {
  co::Scheme s{};
  std::string why = av::parse_scheme(arg, s);
  if (!why.empty()) return err(cmd, why);
  g_schemes_seen.push_back({std::string(co::to_string(s)), where_of(cmd)});
  return nullptr;
}

const char* cmd_dep_headers(cmd_parms* cmd, void* dcv, const char* args) {
  std::vector<std::string> names;
  std::string why = av::parse_header_names(args ? args : "", names);
  if (!why.empty()) return err(cmd, why);
  static_cast<DirConf*>(dcv)->dependency_headers =
      std::make_shared<const std::vector<std::string>>(std::move(names));
  return nullptr;
}

const char* cmd_ack_timeout(cmd_parms* cmd, void*, const char* arg) {
  uint32_t ms = 0;
  std::string why = av::parse_millis(arg, 1, 60000, ms);
  if (!why.empty()) return err(cmd, why);
  g_ack_timeouts_seen.push_back({std::to_string(ms), where_of(cmd)});
  return nullptr;
}

const char* cmd_agent(cmd_parms* cmd, void*, const char* arg) {
  if (const char* e = ap_check_cmd_context(cmd, GLOBAL_ONLY)) return e;
  if (!arg || arg[0] != '/')
    return err(cmd, std::string("'") + (arg ? arg : "") +
                        "' is not an absolute path: name the writer agent's socket ([writer] "
                        "socket in its memd configuration), e.g. /run/tierce/app1-agent.sock");
  server_conf(cmd->server)->agent_socket = arg;
  return nullptr;
}

const char* cmd_node_key(cmd_parms* cmd, void*, const char* arg) {
  if (const char* e = ap_check_cmd_context(cmd, GLOBAL_ONLY)) return e;
  if (!arg || arg[0] != '/')
    return err(cmd, std::string("'") + (arg ? arg : "") + "' is not an absolute path");
  server_conf(cmd->server)->node_key = arg;
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
                  "must equal the topology's [coherence] scheme (one per cluster); optional"),
    AP_INIT_RAW_ARGS("AppVersionDependencyHeaders", as_cmd(cmd_dep_headers),
                     nullptr, RSRC_CONF | ACCESS_CONF,
                     "response headers listing a page's dependencies (default Tierce-Depends)"),
    AP_INIT_TAKE1("AppVersionAckTimeout", as_cmd(cmd_ack_timeout), nullptr,
                  RSRC_CONF | ACCESS_CONF,
                  "deprecated: an update waits at most the fence bound of the topology "
                  "([coherence] lease_ms + clock_skew_ms); a smaller value is refused"),
    AP_INIT_TAKE1("AppVersionAgent", as_cmd(cmd_agent), nullptr, RSRC_CONF,
                  "the node's writer agent socket ([writer] socket): the children then hold no "
                  "cluster secret (recommended; docs/coherence.md \"The agent socket\")"),
    AP_INIT_TAKE1("AppVersionNodeKey", as_cmd(cmd_node_key), nullptr, RSRC_CONF,
                  "without AppVersionAgent, in a keyed cluster: this node's key file (the "
                  "children sign with it; prefer AppVersionAgent)"),
    AP_INIT_TAKE1("AppVersionOpTimeout", as_cmd(cmd_op_timeout), nullptr,
                  RSRC_CONF, "ms for one sequence read or registration call (default 200)"),
    {nullptr, {}, nullptr, 0, RAW_ARGS, nullptr},
};

// ---- lifecycle -------------------------------------------------------------------------------

int pre_config(apr_pool_t*, apr_pool_t*, apr_pool_t*) {
  g_any_enabled = false;
  g_schemes_seen.clear();
  g_ack_timeouts_seen.clear();
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
  av::ServerSettings in;
  in.topology_path = sc->topology_path ? sc->topology_path : "";
  in.node = sc->node ? sc->node : "";
  in.op_timeout_ms = sc->op_timeout_ms;
  in.agent_socket = sc->agent_socket ? sc->agent_socket : "";
  in.node_key = sc->node_key ? sc->node_key : "";
  in.any_enabled = g_any_enabled;
  in.schemes = g_schemes_seen;
  in.ack_timeouts = g_ack_timeouts_seen;
  auto resolved = av::resolve_server_config(in);
  if (!resolved) {
    ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "%s", resolved.message().c_str());
    return HTTP_INTERNAL_SERVER_ERROR;
  }
  if (!*resolved) {
    ap_log_error(APLOG_MARK, APLOG_INFO, 0, s,
                 "APPVER0017 mod_appversion loaded but not configured (no AppVersionTopology)");
    return OK;
  }
  av::ModuleConfig& cfg = **resolved;
  auto rt = std::make_unique<Runtime>();
  rt->agent_socket = cfg.agent_socket;
  rt->agent_timeouts = cfg.agent_timeouts;
  if (rt->agent_socket.empty()) {
    ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s,
                 "APPVER0029 without AppVersionAgent every httpd child holds the cluster secret "
                 "and maps this node's invalidation counter: any PHP script can read them and "
                 "move any node's versions. Run the node's writer agent with [writer] socket and "
                 "name it here (docs/coherence.md \"The agent socket\")");
    try {
      // Created (or found) here, before any child forks: every child numbers its invalidations
      // in the same counter, which the node's writer agent (and memd) exports and every home
      // reads (writer.h); our topology's digest goes with every number.
      rt->writer = std::make_unique<co::WriterLog>(cfg.writer_segment,
                                                   cfg.topology.coherence_digest());
    } catch (const std::exception& e) {
      ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s,
                   "APPVER0025 cannot map this node's invalidation counter %s: %s (check "
                   "/dev/shm space and permissions; the node's memd maps the same segment)",
                   cfg.writer_segment.c_str(), e.what());
      return HTTP_INTERNAL_SERVER_ERROR;
    }
  }
  rt->topology = std::move(cfg.topology);
  rt->secret = std::move(cfg.secret);
  rt->node_key = std::move(cfg.node_key);
  rt->node = std::move(cfg.node);
  rt->tuning = cfg.tuning;
  delete g_runtime;
  g_runtime = rt.release();
  apr_pool_cleanup_register(pconf, nullptr, drop_runtime, apr_pool_cleanup_null);
  // (httpd's formatter knows neither %zu nor %llu: numbers go through std::to_string)
  std::string msg = "APPVER0018 node " + g_runtime->node + " of cluster " +
                    g_runtime->topology.name + ": " +
                    std::to_string(g_runtime->topology.app_nodes().size()) + " app nodes, " +
                    std::to_string(g_runtime->topology.version_slots) + " version slots, op timeout " +
                    std::to_string(sc->op_timeout_ms) + " ms, scheme " +
                    std::string(co::to_string(g_runtime->topology.coherence.scheme)) +
                    ", updates wait at most " +
                    std::to_string(g_runtime->topology.coherence.fence_bound_ms()) + " ms";
  ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "%s", msg.c_str());
  return OK;
}

apr_status_t drop_client(void*) {
  delete g_client;
  g_client = nullptr;
  delete g_agent;
  g_agent = nullptr;
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
    if (!g_runtime->agent_socket.empty())
      g_agent = new co::AgentClient(g_runtime->agent_socket, g_runtime->agent_timeouts);
    else
      g_client = new co::ClusterClient(g_runtime->topology, g_runtime->secret, g_runtime->tuning,
                                       std::move(sink));
    if (g_client && !g_runtime->node_key.empty())
      g_client->sign_as(g_runtime->node, g_runtime->node_key);
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
  uint64_t seq_start;
  const char* home;
};

RequestState* state_of(request_rec* r) {
  return static_cast<RequestState*>(ap_get_module_config(r->request_config, &appversion_module));
}

bool enabled(request_rec* r) {
  DirConf* dc = dir_conf(r);
  return dc && av::enabled(*dc);
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
  if (!g_client && !g_agent) {
    counters().seq_failures.fetch_add(1, std::memory_order_relaxed);
    return DECLINED;
  }
  try {
    const co::Topology& topo = g_runtime->topology;
    const co::NodeInfo& home = topo.home_of(st->key);
    st->home = apr_pstrdup(r->pool, home.name.c_str());
    std::optional<uint64_t> seq;
    std::string why;
    if (g_agent) {
      auto got = g_agent->read_seq(st->key);
      if (got) seq = *got;
      else why = " (" + got.message() + ")";
    } else {
      seq = g_client->read_seq(home.name);
    }
    if (seq) {
      st->seq_read = true;
      st->seq_start = *seq;
    } else {
      counters().seq_failures.fetch_add(1, std::memory_order_relaxed);
      ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r,
                    "APPVER0006 cannot read the invalidation sequence of home %s: this page is "
                    "not cacheable (is %s's memd running and reachable?)%s",
                    home.name.c_str(), home.name.c_str(), why.c_str());
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

void invalidate(request_rec* r, const std::string& list, const char* why, bool all = false) {
  co::Scheme scheme = all ? co::Scheme::InvalidateAll : cluster_scheme();
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
  co::InvalidateOutcome o;
  if (g_agent) {
    co::AgentInvalidation a = g_agent->invalidate(deps, scheme);
    if (!a.answered()) {
      counters().invalidations_fenced.fetch_add(1, std::memory_order_relaxed);
      uint64_t us = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(a.elapsed).count());
      counters().record_wait(us);
      std::string msg = std::string(why) + " invalidation (" + std::string(co::to_string(scheme)) +
                        ", " + std::to_string(deps.size()) + " dependencies) through the writer "
                        "agent's socket " + g_agent->path() + ": " + std::string(co::to_string(a.kind)) +
                        ": " + a.why;
      if (a.kind == co::AgentInvalidation::Kind::Lost)
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "APPVER0030 %s", msg.c_str());
      else
        ap_log_rerror(APLOG_MARK, APLOG_CRIT, 0, r,
                      "APPVER0031 %s. Proxies MAY serve stale pages of this update until the "
                      "agent numbers it (or tierce-binlogd invalidates it): check the writer agent "
                      "(its log, memd.status) now",
                      msg.c_str());
      return;
    }
    o = std::move(a.outcome);
  } else if (!g_client || !g_runtime || !g_runtime->writer) {
    counters().invalidations_fenced.fetch_add(1, std::memory_order_relaxed);
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                  "APPVER0014 invalidation NOT sent: this child has no cluster client (see APPVER0005 "
                  "at its start); proxies may serve stale pages for it: restart httpd");
    return;
  } else {
    o = g_client->invalidate(*g_runtime->writer, g_runtime->node, deps, scheme);
  }
  uint64_t us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(o.elapsed).count());
  counters().record_wait(us);
  counters().acks_received.fetch_add(o.acked.size(), std::memory_order_relaxed);
  std::string what = std::string(why) + " invalidation #" + std::to_string(o.number.number) +
                     " (" + std::string(co::to_string(scheme)) + ", " +
                     std::to_string(deps.size()) + " dependencies)";
  counters().homes_skipped.fetch_add(o.skipped.size(), std::memory_order_relaxed);
  counters().homes_marked.fetch_add(o.marked.size(), std::memory_order_relaxed);
  if (!o.unconfirmed.empty())
    counters().invalidations_unconfirmed.fetch_add(1, std::memory_order_relaxed);
  if (!o.fenced.empty() || !o.unconfirmed.empty()) {
    counters().invalidations_fenced.fetch_add(1, std::memory_order_relaxed);
    counters().homes_fenced.fetch_add(o.fenced.size(), std::memory_order_relaxed);
    std::string missing;
    for (const auto& m : o.fenced) missing += (missing.empty() ? "" : ", ") + m;
    for (const auto& m : o.unconfirmed)
      missing += (missing.empty() ? "" : ", ") + m + " [another topology: NOT covered, COH0108]";
    std::string msg = "APPVER0007 " + what + " acknowledged by " + std::to_string(o.acked.size()) +
                      " of " + std::to_string(o.homes) + " homes; returned after the fence bound (" +
                      std::to_string(g_runtime->topology.coherence.fence_bound_ms()) +
                      " ms) relying on the fence of: " + missing +
                      ". Those homes cannot vouch for their pages until they hold this "
                      "invalidation (proxies forward their pages meanwhile): check their memd "
                      "and the network from here";
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "%s", msg.c_str());
  } else {
    std::string skipped;
    for (const auto& m : o.skipped) skipped += " " + m;
    std::string msg = "APPVER0008 " + what + " acknowledged by " + std::to_string(o.acked.size()) +
                      " of " + std::to_string(o.homes) + " homes in " + std::to_string(us) + " us" +
                      (skipped.empty() ? "" : "; not waited for (skip marks):" + skipped);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "%s", msg.c_str());
  }
}

// Returns true when the page was registered and tagged.
bool register_page(request_rec* r, RequestState* st, bool deps_found, const std::string& list) {
  av::PageFacts f;
  f.has_key = st && st->has_key;
  f.is_get = st && st->is_get;
  f.status = r->status;
  f.seq_read = st && st->seq_read;
  f.deps_found = deps_found;
  f.app_nocache = apr_table_get(r->notes, av::kNoCacheNote) != nullptr;
  f.scheme = cluster_scheme();
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
  f.deps_count = deps.size();
  av::Decision d = av::decide_registration(f);
  if (d == av::Decision::NoKey) return false;
  if (d != av::Decision::Register) {
    counters().not_registered.fetch_add(1, std::memory_order_relaxed);
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "APPVER0009 page not registered: %s",
                  std::string(av::to_string(d)).c_str());
    return false;
  }
  if (!g_client && !g_agent) return false;
  co::RegisterResult res = g_agent ? g_agent->register_page(st->key, st->seq_start, deps)
                                   : g_client->register_page(st->home, st->key, st->seq_start, deps);
  if (!res.cacheable()) {
    switch (av::counter_of(res.refusal)) {
      case av::RefusalCounter::Race: counters().refused_race.fetch_add(1, std::memory_order_relaxed); break;
      case av::RefusalCounter::Log: counters().refused_log.fetch_add(1, std::memory_order_relaxed); break;
      case av::RefusalCounter::Pending: counters().refused_pending.fetch_add(1, std::memory_order_relaxed); break;
      case av::RefusalCounter::Other: counters().refused_other.fetch_add(1, std::memory_order_relaxed); break;
    }
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r,
                  "APPVER0009 page not cacheable: home %s refused the registration: %s", st->home,
                  res.reason.c_str());
    return false;
  }
  counters().registrations.fetch_add(1, std::memory_order_relaxed);
  apr_table_setn(r->headers_out, av::kTagHeader,
                 apr_pstrdup(r->pool, av::format_tag(st->home, res.slot, res.version).c_str()));
  return true;
}

// What the filter saw on its first brigade, compared again at the end of the response.
struct FilterCtx {
  const char* inv_note;  // r->notes tierce-invalidate then (nullptr: unset)
  const char* dep_note;  // r->notes tierce-depends then
  const char* inv_list;  // the invalidation sent at the first output (nullptr: none)
  bool inv_all;          // ... and it was an invalidate-all (tierce-invalidate-all note)
  const char* tagged_deps;  // the dependency list the page was registered with (nullptr: not)
  bool first_was_last;      // the first output held the end of the response (script finished)
};

const char* note_copy(request_rec* r, const char* name) {
  const char* v = apr_table_get(r->notes, name);
  return v ? apr_pstrdup(r->pool, v) : nullptr;
}

bool same(const char* a, const char* b) {
  return (!a && !b) || (a && b && std::strcmp(a, b) == 0);
}

bool has_eos(apr_bucket_brigade* bb) {
  for (apr_bucket* b = APR_BRIGADE_FIRST(bb); b != APR_BRIGADE_SENTINEL(bb); b = APR_BUCKET_NEXT(b))
    if (APR_BUCKET_IS_EOS(b)) return true;
  return false;
}

void process_response(request_rec* r, FilterCtx* ctx) {
  DirConf* dc = dir_conf(r);
  HeaderView hv;
  apr_table_do(collect_header, &hv, r->headers_out, nullptr);
  apr_table_do(collect_header, &hv, r->err_headers_out, nullptr);
  ctx->inv_note = note_copy(r, av::kInvalidateNote);
  ctx->dep_note = note_copy(r, av::kDependsNote);

  // a. invalidation: the app has committed — unless it sent output before it committed (a
  //    flush): then the end of the response invalidates again (finish_response)
  bool inv_found = false;
  std::string inv = av::collect_values(hv.list, {av::kInvalidateHeader}, &inv_found);
  ctx->inv_all = apr_table_get(r->notes, av::kInvalidateAllNote) != nullptr;
  if (inv_found || ctx->inv_note || ctx->inv_all) {
    std::string list = av::join_lists(inv, ctx->inv_note ? ctx->inv_note : "");
    ctx->inv_list = apr_pstrdup(r->pool, list.c_str());
    invalidate(r, list, "update", ctx->inv_all);
  }

  // b. registration
  std::vector<std::string> dep_headers = av::dependency_headers(*dc);
  bool deps_found = false;
  std::string deps = av::collect_values(hv.list, dep_headers, &deps_found);
  if (ctx->dep_note) deps_found = true;
  deps = av::join_lists(deps, ctx->dep_note ? ctx->dep_note : "");

  // c. no protocol header reaches the client (a Tierce-Tag set by the app is dropped too)
  for (const std::string& h : av::headers_to_strip(dep_headers)) {
    apr_table_unset(r->headers_out, h.c_str());
    apr_table_unset(r->err_headers_out, h.c_str());
  }
  if (register_page(r, state_of(r), deps_found, deps))
    ctx->tagged_deps = apr_pstrdup(r->pool, deps.c_str());
}

// At the end of the response (EOS, before it is passed on: the client has not got the whole
// response yet). Returns true when the response must be cut short (its script aborted).
//  - an update whose first output left before its script ended (a flush) may have committed
//    after that first invalidation: it is invalidated again now, after the script ended;
//  - a later tierce-invalidate note is sent (and waited for) here;
//  - a later tierce-depends note comes too late for the tag already sent: the page's
//    registered dependencies are invalidated, so the tag the proxy got is stale at once;
//  - a PHP script that aborted after its first output (fatal error, uncaught exception) sent a
//    well-framed but truncated page: its tag is withdrawn the same way, and the response is cut
//    (no terminating chunk) so that no cache takes it for complete.
bool finish_response(request_rec* r, FilterCtx* ctx) {
  if (av::needs_second_invalidation(ctx->inv_list != nullptr, ctx->first_was_last)) {
    counters().second_invalidations.fetch_add(1, std::memory_order_relaxed);
    invalidate(r, ctx->inv_list, "end-of-response", ctx->inv_all);
  }
  if (!ctx->inv_all && apr_table_get(r->notes, av::kInvalidateAllNote)) {
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r,
                  "APPVER0022 tierce-invalidate-all note set after the first output: everything "
                  "is invalidated at the end of the response");
    invalidate(r, "", "late-note", true);
  }
  const char* inv_note = apr_table_get(r->notes, av::kInvalidateNote);
  if (inv_note && !same(inv_note, ctx->inv_note)) {
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r,
                  "APPVER0022 tierce-invalidate note set after the first output: sent at the end "
                  "of the response");
    invalidate(r, inv_note, "late-note");
  }
  const bool aborted = apr_table_get(r->notes, kAbortNote) != nullptr;
  if (ctx->tagged_deps && aborted) {
    counters().aborted_responses.fetch_add(1, std::memory_order_relaxed);
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r,
                  "APPVER0026 the PHP script aborted after the page's headers were sent (see the "
                  "PHP error above): its tag is withdrawn (its dependencies are invalidated) and "
                  "the response is cut short, so no cache stores the truncated page");
    invalidate(r, ctx->tagged_deps, "withdrawal");
    return true;
  }
  const char* dep_note = apr_table_get(r->notes, av::kDependsNote);
  if (ctx->tagged_deps && apr_table_get(r->notes, av::kNoCacheNote)) {
    ap_log_rerror(APLOG_MARK, APLOG_INFO, 0, r,
                  "APPVER0027 tierce-nocache note set after the page's headers were sent (%s): "
                  "the tag is withdrawn (its dependencies are invalidated)",
                  apr_table_get(r->notes, av::kNoCacheNote));
    invalidate(r, ctx->tagged_deps, "withdrawal");
    return false;
  }
  if (ctx->tagged_deps && !same(dep_note, ctx->dep_note)) {
    ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r,
                  "APPVER0021 tierce-depends note set after the page's headers were sent: the "
                  "tag is withdrawn (its dependencies are invalidated); call apache_note() before "
                  "any output, or buffer the page with ob_start()");
    invalidate(r, ctx->tagged_deps, "withdrawal");
  }
  return false;
}

apr_status_t output_filter(ap_filter_t* f, apr_bucket_brigade* bb) {
  request_rec* r = f->r;
  auto* ctx = static_cast<FilterCtx*>(f->ctx);
  if (!ctx) {
    ctx = static_cast<FilterCtx*>(apr_pcalloc(r->pool, sizeof(FilterCtx)));
    f->ctx = ctx;
    ctx->first_was_last = has_eos(bb);
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
    bool cut = false;
    try {
      cut = finish_response(r, ctx);
    } catch (const std::exception& e) {
      ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                    "APPVER0013 end-of-response processing failed: %s", e.what());
    }
    if (cut) {
      // What mod_proxy does for a backend that broke mid-body: a 502 error bucket before the
      // EOS makes httpd's chunk filter leave out the terminating chunk, and the connection is
      // closed: the receiver sees a truncated transfer, not a complete page.
      r->connection->keepalive = AP_CONN_CLOSE;
      APR_BUCKET_INSERT_BEFORE(
          b, ap_bucket_error_create(HTTP_BAD_GATEWAY, nullptr, r->pool, r->connection->bucket_alloc));
    }
    ap_remove_output_filter(f);
    break;
  }
  return ap_pass_brigade(f->next, bb);
}

// PHP logs an abnormal end of a script (fatal error, uncaught exception, parse error) through
// httpd with the request: that is how this module learns that a response is cut short.
void error_log_hook(const ap_errorlog_info* info, const char* errstr) {
  if (!info || !info->r || !errstr) return;
  // The log hook gets a const request; its notes table is the request's own (same thread).
  request_rec* r = const_cast<request_rec*>(info->r);
  while (r->main) r = r->main;
  if (!av::is_php_abort(info->level & APLOG_LEVELMASK, errstr)) return;
  if (!r->per_dir_config || !r->notes || !enabled(r)) return;
  apr_table_setn(r->notes, kAbortNote, "1");
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
    body += "scheme " + std::string(co::to_string(g_runtime->topology.coherence.scheme)) + "\n";
    body += "fence_bound_ms " + std::to_string(g_runtime->topology.coherence.fence_bound_ms()) + "\n";
    if (g_runtime->writer)
      body += "writer_issued " + std::to_string(g_runtime->writer->last().number) + "\n";
  }
  body += std::string("client ") + (g_client || g_agent ? "1" : "0") + "\n";
  if (g_agent) body += "agent_socket " + g_agent->path() + "\n";
  ap_rwrite(body.data(), static_cast<int>(body.size()), r);
  return OK;
}

// The numbers of appversion-status in Prometheus text format (mod_appversion/README.md
// "Metrics").
int metrics_handler(request_rec* r) {
  if (!r->handler || std::strcmp(r->handler, kMetricsHandler) != 0) return DECLINED;
  if (r->method_number != M_GET) return HTTP_METHOD_NOT_ALLOWED;
  ap_set_content_type(r, "text/plain; version=0.0.4; charset=utf-8");
  if (r->header_only) return OK;
  base::MetricLabels common;
  if (g_runtime) common.emplace_back("node", g_runtime->node);
  base::Metrics m(common);
  if (g_runtime)
    m.gauge("tierce_appversion_info", "Always 1; the labels say which cluster and scheme.",
            uint64_t(1),
            {{"cluster", g_runtime->topology.name},
             {"scheme", std::string(co::to_string(g_runtime->topology.coherence.scheme))}});
  m.gauge("tierce_appversion_shared_counters",
          "1: the counters are shared by all children; 0: per child (APPVER0016).",
          uint64_t(g_counters ? 1 : 0));
  m.gauge("tierce_appversion_client",
          "1: this child has a cluster client (or its writer agent's socket).",
          uint64_t(g_client || g_agent ? 1 : 0));
  counters().metrics(m);
  if (g_runtime) {
    m.gauge("tierce_appversion_fence_bound_seconds", "The cluster's fence bound.",
            double(g_runtime->topology.coherence.fence_bound_ms()) / 1e3);
    if (g_runtime->writer)
      m.gauge("tierce_appversion_writer_issued",
              "The last writer number this node issued (it only grows).",
              uint64_t(g_runtime->writer->last().number));
  }
  std::string body = m.text();
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
  ap_hook_handler(metrics_handler, nullptr, nullptr, APR_HOOK_MIDDLE);
  ap_hook_error_log(error_log_hook, nullptr, nullptr, APR_HOOK_MIDDLE);
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
