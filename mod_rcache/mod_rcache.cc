// mod_rcache/mod_rcache.cc — the proxy tier's Apache module: a coherent cache of dynamic pages in
// front of mod_proxy. Thin glue: the rules live in rcache_logic.*, the hit decision (lookup + the
// one version read -> Verdict) in coherence/hit.*, the arena and the version reads in coherence/.
// See README.md for the directives and the request path.
//
// Hook choice: the cache lookup runs in the *handler* phase with APR_HOOK_REALLY_FIRST, not in
// quick_handler: by then the <Location>/<Directory> walk has merged the per-directory config
// (RCache On|Off per Location) and access control (Require, auth) has run, so a cached page is
// never served to a client the location would refuse. It runs before mod_proxy's handler; on a
// hit it answers and returns OK, otherwise it DECLINEs and mod_proxy forwards.
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "coherence/arena.h"
#include "coherence/client.h"
#include "coherence/coop_cache.h"
#include "coherence/coop_pool_store.h"
#include "coherence/pool_owner.h"
#include "coherence/hit.h"
#include "coherence/key.h"
#include "coherence/topology.h"
#include "mod_rcache/rcache_logic.h"

#include <ap_mpm.h>
#include <apr_buckets.h>
#include <apr_strings.h>
#include <http_config.h>
#include <http_core.h>
#include <http_log.h>
#include <http_protocol.h>
#include <http_request.h>
#include <httpd.h>
#include <util_filter.h>

extern "C" __attribute__((visibility("default"))) module AP_MODULE_DECLARE_DATA rcache_module;
#ifdef APLOG_USE_MODULE
static int* const aplog_module_index = &(rcache_module.module_index);
#endif

namespace co = tierce::coherence;
namespace rc = tierce::rcache;

namespace {

constexpr const char* kFilterName = "RCACHE_OUT";

// ---- configuration ---------------------------------------------------------------------------
// The directives as read (rc::ServerSettings, rc::PolicySettings: unset is empty, 0 or -1); what
// they mean, their defaults and their merging are rcache_logic's.

template <class T>
apr_status_t destroy_in_pool(void* p) {
  static_cast<T*>(p)->~T();
  return APR_SUCCESS;
}
template <class T>
T* pool_new(apr_pool_t* pool) {
  T* t = new (apr_palloc(pool, sizeof(T))) T();
  apr_pool_cleanup_register(pool, t, destroy_in_pool<T>, apr_pool_cleanup_null);
  return t;
}

struct ServerConf {
  rc::ServerSettings settings;  // main server only (RCacheTopology, RCacheNode, RCacheSize...)
  rc::PolicySettings policy;    // per vhost (RCacheStoreSetCookie... RCacheMaxAge)
};

struct DirConf {
  int enabled = -1;  // RCache: -1 unset (Off)
};

// What the parent resolved and created (check_config, post_config); the children inherit it over
// fork. The per-child objects are in Child (child_init).
struct Process {
  bool enabled_anywhere = false;  // some "RCache On" in this configuration pass
  rc::ModuleConfig cfg;           // the resolved RCache* directives (rc::resolve_server_config)
  // Created by the parent, mapped by every child (inherited): deleted only by its creator, as a
  // child's exit may run the configuration pool's cleanups too (parent_cleanup).
  co::CacheArena* arena = nullptr;
  pid_t arena_creator = 0;
};
Process g;

ServerConf* sconf(server_rec* s) {
  return static_cast<ServerConf*>(ap_get_module_config(s->module_config, &rcache_module));
}
DirConf* dconf(request_rec* r) {
  return static_cast<DirConf*>(ap_get_module_config(r->per_dir_config, &rcache_module));
}

void* create_server_conf(apr_pool_t* p, server_rec*) { return pool_new<ServerConf>(p); }
void* merge_server_conf(apr_pool_t* p, void* basev, void* addv) {
  auto* base = static_cast<ServerConf*>(basev);
  auto* add = static_cast<ServerConf*>(addv);
  auto* m = pool_new<ServerConf>(p);
  m->settings = base->settings;
  m->policy = rc::merge_policy(base->policy, add->policy);
  return m;
}
void* create_dir_conf(apr_pool_t* p, char*) {
  return new (apr_pcalloc(p, sizeof(DirConf))) DirConf();
}
void* merge_dir_conf(apr_pool_t* p, void* basev, void* addv) {
  auto* m = new (apr_pcalloc(p, sizeof(DirConf))) DirConf();
  auto* base = static_cast<DirConf*>(basev);
  auto* add = static_cast<DirConf*>(addv);
  m->enabled = rc::merge_enabled(base->enabled, add->enabled);
  return m;
}

rc::Policy policy_of(server_rec* s) { return rc::resolve_policy(sconf(s)->policy); }

// A directive's value into `into`, or httpd's configuration error.
template <class T, class V>
const char* take(cmd_parms* cmd, const tierce::base::Result<V>& v, T& into) {
  if (!v) return apr_pstrdup(cmd->pool, v.message().c_str());
  into = T(*v);
  return nullptr;
}
// The same for a directive of the main server only.
template <class T, class V>
const char* take_global(cmd_parms* cmd, const tierce::base::Result<V>& v, T& into) {
  if (const char* err = ap_check_cmd_context(cmd, GLOBAL_ONLY)) return err;
  return take(cmd, v, into);
}

const char* set_enabled(cmd_parms*, void* dc, int on) {
  static_cast<DirConf*>(dc)->enabled = on ? 1 : 0;
  if (on) g.enabled_anywhere = true;
  return nullptr;
}

const char* set_topology(cmd_parms* cmd, void*, const char* arg) {
  if (const char* err = ap_check_cmd_context(cmd, GLOBAL_ONLY)) return err;
  const char* path = ap_server_root_relative(cmd->pool, arg);
  if (!path || !*arg)
    return apr_psprintf(cmd->pool, "RCacheTopology: invalid path '%s': give the cluster topology "
                                   "file, e.g. RCacheTopology /etc/tierce/cluster.toml", arg);
  sconf(cmd->server)->settings.topology = path;
  return nullptr;
}

const char* set_node(cmd_parms* cmd, void*, const char* arg) {
  if (const char* err = ap_check_cmd_context(cmd, GLOBAL_ONLY)) return err;
  if (!*arg) return "RCacheNode: give this proxy's node name as the topology file names it";
  sconf(cmd->server)->settings.node = arg;
  return nullptr;
}

const char* set_size(cmd_parms* cmd, void*, const char* arg) {
  return take_global(cmd, rc::arena_size_arg(arg), sconf(cmd->server)->settings.size);
}
const char* set_max_entry(cmd_parms* cmd, void*, const char* arg) {
  return take_global(cmd, rc::max_entry_arg(arg), sconf(cmd->server)->settings.max_entry);
}
const char* set_version_timeout(cmd_parms* cmd, void*, const char* arg) {
  return take_global(cmd, rc::version_timeout_arg(arg),
                     sconf(cmd->server)->settings.version_timeout_ms);
}
const char* set_retry_after(cmd_parms* cmd, void*, const char* arg) {
  return take_global(cmd, rc::retry_after_arg(arg), sconf(cmd->server)->settings.retry_after_ms);
}

const char* set_flag_member(cmd_parms* cmd, void*, int on) {
  rc::PolicySettings& c = sconf(cmd->server)->policy;
  auto which = reinterpret_cast<intptr_t>(cmd->info);
  int v = on ? 1 : 0;
  if (which == 1) c.store_set_cookie = v;
  else if (which == 2) c.store_authorized = v;
  else if (which == 4) c.store_cookie_requests = v;
  else if (which == 5) c.strip_protocol_headers = v;
  else c.require_tag = v;
  return nullptr;
}

const char* set_max_age(cmd_parms* cmd, void*, const char* arg) {
  return take(cmd, rc::max_age_arg(arg), sconf(cmd->server)->policy.max_age_s);
}

const char* set_coop(cmd_parms* cmd, void*, const char* arg) {
  return take_global(cmd, rc::coop_arg(arg), sconf(cmd->server)->settings.coop);
}

const char* add_coop_pool(cmd_parms* cmd, void*, const char* arg) {
  if (const char* err = ap_check_cmd_context(cmd, GLOBAL_ONLY)) return err;
  rc::ServerSettings& c = sconf(cmd->server)->settings;
  if (!*arg) return "RCacheCoopPool: give the names of the nodes whose memd donates memory ([pool])";
  if (!c.coop_pool) c.coop_pool.emplace();
  c.coop_pool->emplace_back(arg);
  return nullptr;
}

const char* set_coop_threshold(cmd_parms* cmd, void*, const char* arg) {
  return take_global(cmd, rc::coop_threshold_arg(arg), sconf(cmd->server)->settings.coop_threshold);
}
const char* set_coop_pool_slabs(cmd_parms* cmd, void*, const char* arg) {
  return take_global(cmd, rc::coop_pool_slabs_arg(arg),
                     sconf(cmd->server)->settings.coop_pool_slabs);
}
const char* set_coop_placement(cmd_parms* cmd, void*, const char* arg) {
  return take_global(cmd, rc::coop_placement_arg(arg),
                     sconf(cmd->server)->settings.coop_placement);
}

#define RC_FN(f) reinterpret_cast<cmd_func>(reinterpret_cast<void (*)()>(f))
const command_rec rcache_cmds[] = {
    AP_INIT_FLAG("RCache", RC_FN(set_enabled), nullptr, RSRC_CONF | ACCESS_CONF,
                 "On|Off: cache responses of this location (default Off)"),
    AP_INIT_TAKE1("RCacheTopology", RC_FN(set_topology), nullptr, RSRC_CONF,
                  "the cluster topology file (required when RCache On is used)"),
    AP_INIT_TAKE1("RCacheNode", RC_FN(set_node), nullptr, RSRC_CONF,
                  "this proxy's node name in the topology"),
    AP_INIT_TAKE1("RCacheSize", RC_FN(set_size), nullptr, RSRC_CONF,
                  "arena ring size, e.g. 256M (default 256M)"),
    AP_INIT_TAKE1("RCacheMaxEntrySize", RC_FN(set_max_entry), nullptr, RSRC_CONF,
                  "largest cached response, e.g. 1M (default 1M, at most RCacheSize/4)"),
    AP_INIT_TAKE1("RCacheVersionTimeout", RC_FN(set_version_timeout), nullptr, RSRC_CONF,
                  "deadline of one version read in ms (default: the topology's op_timeout_ms)"),
    AP_INIT_TAKE1("RCacheRetryAfter", RC_FN(set_retry_after), nullptr, RSRC_CONF,
                  "ms a failed home is skipped, requests forward at once (default 100)"),
    AP_INIT_FLAG("RCacheStoreSetCookie", RC_FN(set_flag_member), reinterpret_cast<void*>(1),
                 RSRC_CONF, "On|Off: cache responses carrying Set-Cookie (default Off)"),
    AP_INIT_FLAG("RCacheStoreAuthorized", RC_FN(set_flag_member), reinterpret_cast<void*>(2),
                 RSRC_CONF, "On|Off: serve and store requests with Authorization (default Off)"),
    AP_INIT_FLAG("RCacheRequireTag", RC_FN(set_flag_member), reinterpret_cast<void*>(3),
                 RSRC_CONF, "On|Off: only cache responses with a Tierce-Tag (default On)"),
    AP_INIT_FLAG("RCacheStoreCookieRequests", RC_FN(set_flag_member), reinterpret_cast<void*>(4),
                 RSRC_CONF,
                 "On|Off: store responses to requests with Cookie even without Cache-Control: "
                 "public (default Off)"),
    AP_INIT_FLAG("RCacheStripProtocolHeaders", RC_FN(set_flag_member), reinterpret_cast<void*>(5),
                 RSRC_CONF,
                 "On|Off: remove Tierce-* headers of every request and response of this server "
                 "(default On); Off only for an app-tier vhost in the proxy's own httpd"),
    AP_INIT_TAKE1("RCacheMaxAge", RC_FN(set_max_age), nullptr, RSRC_CONF,
                  "seconds after which an entry is dropped whatever its version (default 600, "
                  "0 = no limit)"),
    AP_INIT_TAKE1("RCacheCoop", RC_FN(set_coop), nullptr, RSRC_CONF,
                  "Off|BCC|CCWR|MTACC|HYBCC: cooperative caching across the topology's proxies "
                  "(default Off; each proxy's memd needs a [coop] section)"),
    AP_INIT_ITERATE("RCacheCoopPool", RC_FN(add_coop_pool), nullptr, RSRC_CONF,
                    "MTACC/HYBCC: the nodes whose memd donates memory ([pool]); default: every "
                    "app node"),
    AP_INIT_TAKE1("RCacheCoopThreshold", RC_FN(set_coop_threshold), nullptr, RSRC_CONF,
                  "HYBCC: pages of this size or more live in pool memory (default 16K)"),
    AP_INIT_TAKE1("RCacheCoopPoolSlabs", RC_FN(set_coop_pool_slabs), nullptr, RSRC_CONF,
                  "MTACC/HYBCC: the most pool slabs one httpd child holds (default 16)"),
    AP_INIT_TAKE1("RCacheCoopPlacement", RC_FN(set_coop_placement), nullptr, RSRC_CONF,
                  "MTACC/HYBCC: which donor gives slabs: local_first, most_free (default) or "
                  "power_of_two"),
    {nullptr, {}, nullptr, 0, RAW_ARGS, nullptr}};

// ---- helpers -----------------------------------------------------------------------------------

int to_aplevel(tierce::fabric::LogLevel l) {
  switch (l) {
    case tierce::fabric::LogLevel::Debug: return APLOG_DEBUG;
    case tierce::fabric::LogLevel::Info: return APLOG_INFO;
    case tierce::fabric::LogLevel::Warn: return APLOG_WARNING;
    default: return APLOG_ERR;
  }
}

// All values of a header, joined with ", " (empty when absent).
std::string joined(apr_table_t* t, const char* name) {
  std::string out;
  struct Acc {
    std::string* out;
  } acc{&out};
  apr_table_do(
      [](void* rec, const char*, const char* value) -> int {
        auto* a = static_cast<Acc*>(rec);
        if (!a->out->empty()) a->out->append(", ");
        a->out->append(value ? value : "");
        return 1;
      },
      &acc, t, name, nullptr);
  return out;
}

std::optional<std::string> request_header(request_rec* r, const std::string& name) {
  if (!apr_table_get(r->headers_in, name.c_str())) return std::nullopt;
  return joined(r->headers_in, name.c_str());
}

rc::Headers table_to_headers(const apr_table_t* t) {
  rc::Headers h;
  const apr_array_header_t* arr = apr_table_elts(t);
  auto* elts = reinterpret_cast<const apr_table_entry_t*>(arr->elts);
  for (int i = 0; i < arr->nelts; ++i)
    if (elts[i].key) h.emplace_back(elts[i].key, elts[i].val ? elts[i].val : "");
  return h;
}

// Removes every "Tierce-*" header of a table.
void strip_protocol_headers(apr_pool_t* p, apr_table_t* t) {
  std::vector<const char*> names;
  const apr_array_header_t* arr = apr_table_elts(t);
  auto* elts = reinterpret_cast<const apr_table_entry_t*>(arr->elts);
  for (int i = 0; i < arr->nelts; ++i)
    if (elts[i].key && rc::is_protocol_header(elts[i].key))
      names.push_back(apr_pstrdup(p, elts[i].key));
  for (const char* n : names) apr_table_unset(t, n);
}

int64_t now_us() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

// What the handler decided for a request, read by the output filter.
enum class Mode { None, Hit, Candidate };
struct RequestCtx {
  Mode mode = Mode::None;
  std::string base;  // base key
  uint64_t base_hash = 0;
  uint32_t home = UINT32_MAX;  // the page's home (index in g.cfg.topo.nodes) once it was looked up
};

// The request's cache key (coherence/key.h): scheme as httpd sees it (mod_ssl, or the scheme of
// the vhost's ServerName), host as the client named it, the port (base_key drops the scheme's
// default one), and the request target as received.
std::string request_base_key(request_rec* r) {
  const char* scheme = ap_http_scheme(r);
  std::string host = r->hostname ? r->hostname : (r->server->server_hostname ? r->server->server_hostname : "");
  apr_port_t port = ap_get_server_port(r);
  if (port != 0) host += ":" + std::to_string(port);
  return co::base_key(scheme ? scheme : "http", host, r->unparsed_uri ? r->unparsed_uri : "/");
}

// ---- lifecycle ---------------------------------------------------------------------------------

int rcache_pre_config(apr_pool_t*, apr_pool_t*, apr_pool_t*) {
  g.enabled_anywhere = false;
  return OK;
}

// Validates everything RCache On needs, so that `httpd -t` and startup fail with a clear message
// (rc::resolve_server_config; this only reads the directives and keeps the result).
int rcache_check_config(apr_pool_t*, apr_pool_t*, apr_pool_t*, server_rec* s) {
  if (!g.enabled_anywhere) return OK;
  auto r = rc::resolve_server_config(sconf(s)->settings);
  if (!r) {
    ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_CRIT, 0, nullptr, "%s", r.message().c_str());
    return HTTP_INTERNAL_SERVER_ERROR;
  }
  g.cfg = std::move(*r);
  return OK;
}

apr_status_t parent_cleanup(void*) {
  if (g.arena && g.arena_creator == getpid()) {
    delete g.arena;
    g.arena = nullptr;
    try {
      tierce::fabric::SharedSegment::unlink(g.cfg.segment);
    } catch (...) {
    }
  }
  return APR_SUCCESS;
}

// A new arena (start, restart, graceful restart): the copies this node published from the
// previous one are gone. Drop them from every proxy's part of the directory now, so peers do
// not spend reads on them (they would only fail to verify). Best effort: a proxy that cannot be
// reached keeps hints that its readers will find invalid and withdraw one by one.
void forget_previous_copies(server_rec* s) {
  try {
    co::ClientTuning t;
    t.op_timeout = std::chrono::milliseconds(std::max<uint32_t>(g.cfg.version_timeout_ms, 200));
    t.max_connections_per_node = 1;
    co::ClusterClient client(g.cfg.topo, g.cfg.secret, t, nullptr);
    const uint16_t self = co::node_index(g.cfg.topo, g.cfg.node);
    uint32_t dropped = 0;
    std::string failed;
    for (const auto& n : g.cfg.topo.nodes) {
      if (n.role != co::Role::Proxy) continue;
      auto reply = client.coop_update(n.name, co::dirwire::WithdrawNode{self});
      if (reply && co::update_ok(reply->status)) dropped += reply->count;
      else failed += (failed.empty() ? "" : ", ") + n.name;
    }
    ap_log_error(APLOG_MARK, failed.empty() ? APLOG_INFO : APLOG_WARNING, 0, s,
                 "RCACHE0014 cooperative cache (RCacheCoop %s): %u copies of this node's previous "
                 "arena dropped from the directory%s%s",
                 std::string(co::to_string(g.cfg.coop)).c_str(), dropped,
                 failed.empty() ? "" : "; not reached (their hints fail verification and are "
                                       "withdrawn as peers meet them): ",
                 failed.c_str());
  } catch (const std::exception& e) {
    ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s,
                 "RCACHE0037 cooperative cache: could not drop the previous arena's copies from "
                 "the directory: %s",
                 e.what());
  }
}

int rcache_post_config(apr_pool_t* pconf, apr_pool_t*, apr_pool_t*, server_rec* s) {
  // The first pass is a dry run in a process that exits when httpd detaches: create nothing.
  if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_CREATE_PRE_CONFIG) return OK;
  if (!g.enabled_anywhere) return OK;
  try {
    g.arena = co::CacheArena::create(g.cfg.segment, g.cfg.size).release();
    g.arena_creator = getpid();
  } catch (const std::exception& e) {
    ap_log_error(APLOG_MARK, APLOG_STARTUP | APLOG_CRIT, 0, s,
                 "RCACHE0008 cannot create the cache arena %s (%" APR_UINT64_T_FMT " bytes): %s: check /dev/shm "
                 "space and permissions, or lower RCacheSize",
                 g.cfg.segment.c_str(), (apr_uint64_t)g.cfg.size, e.what());
    return HTTP_INTERNAL_SERVER_ERROR;
  }
  apr_pool_cleanup_register(pconf, nullptr, parent_cleanup, apr_pool_cleanup_null);
  if (g.cfg.coop != co::CoopScheme::Off) forget_previous_copies(s);
  ap_log_error(APLOG_MARK, APLOG_INFO, 0, s,
               "RCACHE0009 cache arena %s created: %" APR_UINT64_T_FMT " bytes, entries up to %" APR_UINT64_T_FMT " bytes; node "
               "%s, topology %s, version reads time out after %u ms",
               g.cfg.segment.c_str(), (apr_uint64_t)g.cfg.size,
               (apr_uint64_t)g.cfg.max_entry, g.cfg.node.c_str(),
               g.cfg.topology_path.c_str(), g.cfg.version_timeout_ms);
  return OK;
}

// One httpd child's cluster objects: made in child_init, destroyed with the child's pool
// (end_child). Each member uses only those declared above it, so the implicit destruction (in
// reverse) ends every user before what it uses. The one cycle: the pool owner's renewal thread
// calls on_lost into the store, so the owner (which joins that thread) is declared after the
// store and goes first; the store keeps a reference to the owner but does not use it in its
// destructor. The owner frees this child's slabs at the donors (best effort; else the lease).
struct Child {
  std::unique_ptr<std::atomic<int>[]> home_state;  // per topology node: 0 unknown, 1 ok, 2 failed
  std::unique_ptr<co::ClusterClient> client;       // nullptr: it could not be set up
  std::unique_ptr<co::ClusterCoopPeers> coop_peers;  // over client (RCacheCoop)
  std::unique_ptr<co::PoolStore> pool_store;         // over pool_owner, client (MTACC, HYBCC)
  std::unique_ptr<co::PoolOwner> pool_owner;         // calls into pool_store
  std::unique_ptr<co::CoopCache> coop_cache;  // nullptr when Off, without client or on failure
};
Child* g_child = nullptr;  // this child's, in its pool; nullptr in the parent

apr_status_t end_child(void*) {
  g_child->~Child();
  g_child = nullptr;
  return APR_SUCCESS;
}

std::unique_ptr<co::ClusterClient> make_client(server_rec* s) {
  co::ClientTuning t;
  t.op_timeout = std::chrono::milliseconds(g.cfg.version_timeout_ms);
  t.retry_after = std::chrono::milliseconds(g.cfg.retry_after_ms);
  int threads = 0;
  if (ap_mpm_query(AP_MPMQ_MAX_THREADS, &threads) != APR_SUCCESS || threads < 1) threads = 1;
  t.max_connections_per_node = size_t(std::max(threads, 1));
  try {
    return std::make_unique<co::ClusterClient>(
        g.cfg.topo, g.cfg.secret, t, [s](tierce::fabric::LogLevel l, std::string_view line) {
          ap_log_error(APLOG_MARK, to_aplevel(l), 0, s, "RCACHE0010 coherence: %.*s",
                       int(line.size()), line.data());
        });
  } catch (const std::exception& e) {
    ap_log_error(APLOG_MARK, APLOG_ERR, 0, s,
                 "RCACHE0011 cannot set up the cluster client: %s: this child serves nothing "
                 "from cache (every request is forwarded)",
                 e.what());
    return nullptr;
  }
}

// MTACC, HYBCC: this child's share of the donors' pool memory.
void start_pool(Child& c, server_rec* s) {
  std::vector<co::PoolDonor> donors;
  std::vector<uint16_t> indices;
  for (const auto& name : g.cfg.coop_pool) {
    const co::NodeInfo& n = g.cfg.topo.node(name);
    donors.push_back(co::PoolDonor{name, g.cfg.topo.uri_of(n), name == g.cfg.node,
                                   tierce::cluster::expect(n)});
    indices.push_back(co::node_index(g.cfg.topo, name));
  }
  co::PoolOwnerOptions po;
  po.owner = g.cfg.node + "." + std::to_string(getpid());
  po.client.secret = g.cfg.secret;
  po.client.op_timeout =
      std::chrono::milliseconds(std::max<uint32_t>(g.cfg.version_timeout_ms, 200));
  po.client.connect_timeout = po.client.op_timeout;
  po.placement = g.cfg.coop_placement;
  c.pool_owner = std::make_unique<co::PoolOwner>(
      std::move(donors), po, [s](tierce::fabric::LogLevel l, std::string_view line) {
        ap_log_error(APLOG_MARK, to_aplevel(l), 0, s, "RCACHE0016 pool: %.*s", int(line.size()),
                     line.data());
      });
  c.pool_store = std::make_unique<co::PoolStore>(*c.pool_owner, *c.client, g.cfg.topo,
                                                 std::move(indices), g.cfg.coop_pool_slabs);
  co::PoolStore* store = c.pool_store.get();
  c.pool_owner->on_lost(
      [store](const std::vector<co::OwnedSlab>& lost, const std::string&) { store->lost(lost); });
  c.pool_owner->start();
}

// RCacheCoop: the peers, the pool memory, the cooperative cache over the arena. On failure the
// child caches alone.
void start_coop(Child& c, server_rec* s) {
  try {
    c.coop_peers = std::make_unique<co::ClusterCoopPeers>(*c.client);
    if (co::uses_pool(g.cfg.coop)) start_pool(c, s);
    c.coop_cache = std::make_unique<co::CoopCache>(g.cfg.coop, g.cfg.topo, g.cfg.node, *g.arena,
                                                   *c.coop_peers, c.pool_store.get(),
                                                   size_t(g.cfg.coop_threshold));
  } catch (const std::exception& e) {
    ap_log_error(APLOG_MARK, APLOG_ERR, 0, s,
                 "RCACHE0013 cannot set up the cooperative cache: %s: this child caches "
                 "alone (RCacheCoop Off)",
                 e.what());
    c.pool_owner.reset();
    c.pool_store.reset();
    c.coop_peers.reset();
  }
}

void rcache_child_init(apr_pool_t* pchild, server_rec* s) {
  if (!g.arena) return;
  g_child = new (apr_palloc(pchild, sizeof(Child))) Child();
  apr_pool_cleanup_register(pchild, nullptr, end_child, apr_pool_cleanup_null);
  Child& c = *g_child;
  c.home_state.reset(new std::atomic<int>[g.cfg.topo.nodes.size()]);
  for (size_t i = 0; i < g.cfg.topo.nodes.size(); ++i) c.home_state[i].store(0);
  c.client = make_client(s);
  if (c.client && g.cfg.coop != co::CoopScheme::Off) start_coop(c, s);
}

// ---- request path ------------------------------------------------------------------------------

// RCacheStripProtocolHeaders: On (the default) everywhere but in an app-tier vhost of the same
// httpd (the single-host layout of packaging/apache2/rcache.conf), which must receive the proxy's
// Tierce-Key and send back its Tierce-Tag. Locations with RCache On strip whatever it says.
bool strips_everything(server_rec* s) { return rc::strips_protocol_headers(sconf(s)->policy); }

// Clients must not inject protocol headers (all requests, whatever RCache says, unless
// RCacheStripProtocolHeaders Off; then rcache_handler strips those of RCache On locations).
int rcache_post_read_request(request_rec* r) {
  if (strips_everything(r->server)) strip_protocol_headers(r->pool, r->headers_in);
  return DECLINED;
}

void count(std::atomic<uint64_t> co::ArenaCounters::*m) {
  if (g.arena) (g.arena->counters().*m).fetch_add(1, std::memory_order_relaxed);
}

// Per-home accounting (tierce_rcache_home_*_total): the page's home is that of its base key, as
// mod_appversion registers it (Tierce-Key is the base key's hash).
uint32_t home_index(uint64_t base_hash) {
  return uint32_t(&g.cfg.topo.home_of(base_hash) - g.cfg.topo.nodes.data());
}
void count_home(uint32_t home, std::atomic<uint64_t> co::ArenaCounters::Home::*m) {
  if (g.arena && home < co::ArenaCounters::kHomeCounters)
    (g.arena->counters().home[home].*m).fetch_add(1, std::memory_order_relaxed);
}

ap_filter_rec_t* g_out_filter = nullptr;  // RCACHE_OUT's registration (register_hooks)

// Where a hit's body enters the output chain: the filter right after this request's RCACHE_OUT,
// i.e. the point where a miss's body was captured. Filters before it (RESOURCE filters such as
// mod_substitute, mod_include, mod_sed, and CONTENT_SET ones inserted ahead of it) already shaped
// the stored body and must not run a second time; those after it run on hits as on misses.
// nullptr when RCACHE_OUT is not in the chain (then a hit cannot be served faithfully).
ap_filter_t* below_capture_point(request_rec* r) {
  for (ap_filter_t* f = r->output_filters; f; f = f->next)
    if (f->frec == g_out_filter) return f->next;
  return nullptr;
}

int serve_hit(request_rec* r, ap_filter_t* next, const co::CachedEntry& e,
              const rc::StoredResponse& resp) {
  r->status = resp.status;
  if (!resp.content_type.empty()) ap_set_content_type(r, apr_pstrdup(r->pool, resp.content_type.c_str()));
  for (const auto& [n, v] : resp.headers)
    apr_table_add(r->headers_out, apr_pstrdup(r->pool, n.c_str()), apr_pstrdup(r->pool, v.c_str()));
  // Since the page's first store (a copy from a peer keeps it). In doubles: a corrupt stored_at
  // (served with RCacheMaxAge 0, which checks no age) must not overflow.
  double age_s = (double(now_us()) - double(e.stored_at_us)) / 1e6;
  int64_t age = age_s > 0 ? int64_t(std::min(age_s, 2147483648.0)) : 0;
  apr_table_setn(r->headers_out, "Age", apr_psprintf(r->pool, "%" APR_INT64_T_FMT "", (apr_int64_t)age));
  ap_set_content_length(r, apr_off_t(resp.body.size()));
  apr_bucket_brigade* bb = apr_brigade_create(r->pool, r->connection->bucket_alloc);
  if (!r->header_only && !resp.body.empty()) {
    char* body = static_cast<char*>(apr_pmemdup(r->pool, resp.body.data(), resp.body.size()));
    APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_pool_create(body, resp.body.size(), r->pool,
                                                       r->connection->bucket_alloc));
  }
  APR_BRIGADE_INSERT_TAIL(bb, apr_bucket_eos_create(r->connection->bucket_alloc));
  apr_status_t rv = ap_pass_brigade(next, bb);
  if (rv != APR_SUCCESS && !r->connection->aborted)
    ap_log_rerror(APLOG_MARK, APLOG_DEBUG, rv, r, "RCACHE0020 sending a cached page failed");
  return OK;
}

// Reads nothing when this child has no cluster client: every entry is then Unverifiable.
struct NoClientReader final : co::VersionReader {
  std::optional<uint64_t> read_version(const std::string&, uint64_t) override {
    return std::nullopt;
  }
};

int rcache_status_page(request_rec* r, bool metrics);

// Adapts the hit decision (coherence/hit.h) to httpd: counters, log lines, serve or DECLINE.
// Returns OK when the request was answered from the cache.
int lookup_and_adapt(request_rec* r, RequestCtx* ctx, const rc::Policy& pol) {
  Child& c = *g_child;  // the handler checked it
  rc::HeaderGetter get = [r](const std::string& n) { return request_header(r, n); };
  co::HitQuery q{ctx->base, ctx->base_hash, now_us(), pol.max_age_s};
  NoClientReader no_client;
  std::optional<co::ClusterVersionReader> cluster;
  co::VersionReader* reader = &no_client;
  if (c.client) reader = &cluster.emplace(*c.client);
  co::HitResult res =
      co::decide_hit_coop(*g.arena, c.coop_cache.get(), g.cfg.topo, q,
                          rc::entry_format(ctx->base, get), *reader);
  const bool from_peer = !res.peer.empty();

  if (res.version_read) {
    g.arena->record_latency(res.read_ns);
    if (c.home_state && res.entry)
      c.home_state[res.entry->tag.home].store(res.home_version ? 1 : 2, std::memory_order_relaxed);
  }
  const char* home = res.home.c_str();
  switch (res.verdict) {
    case co::Verdict::Miss:
      if (!res.arena_error.empty())
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "RCACHE0022 arena lookup failed: %s",
                      res.arena_error.c_str());
      count(&co::ArenaCounters::misses);
      ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, r, "RCACHE0023 miss %s%s",
                    co::to_hex(ctx->base_hash).c_str(),
                    res.erased_unservable ? " (an unservable entry was erased)" : "");
      return DECLINED;
    case co::Verdict::Unverifiable:
      count(&co::ArenaCounters::version_failures);
      count_home(ctx->home, &co::ArenaCounters::Home::unverifiable);
      if (from_peer) g.arena->counters().coop.remote_unverifiable.fetch_add(1, std::memory_order_relaxed);
      if (!res.reader_error.empty())
        ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "RCACHE0024 version read at %s: %s", home,
                      res.reader_error.c_str());
      ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r,
                    "RCACHE0025 version of slot %" APR_UINT64_T_FMT " at home %s could not be read: forwarded "
                    "(fail closed)",
                    (apr_uint64_t)res.entry->tag.slot, home);
      return DECLINED;
    case co::Verdict::Stale:
      if (res.stale_cause == co::StaleCause::TagMismatch) {
        // Never stored so by this module (finish_store refuses it, RCACHE0035): a copy published
        // by a peer of an older build, or a forged one. Erased (a peer's copy: invalidated at
        // the directory by decide_hit_coop), forwarded.
        count(&co::ArenaCounters::misses);
        count(&co::ArenaCounters::tag_mismatches);
        if (!from_peer && c.coop_cache) c.coop_cache->invalidate(res.key_hash, res.key);
        ap_log_rerror(
            APLOG_MARK, APLOG_WARNING, 0, r,
            "RCACHE0036 %s entry of key %s tagged %s slot %" APR_UINT64_T_FMT
            ", which is not the key's (%s): erased, forwarded%s%s",
            from_peer ? "a peer's" : "an", co::to_hex(ctx->base_hash).c_str(), home,
            (apr_uint64_t)res.entry->tag.slot,
            std::string(co::to_string(co::tag_binding(res.entry->tag, g.cfg.topo, ctx->base_hash)))
                .c_str(),
            from_peer ? "; copy read from " : "", from_peer ? res.peer.c_str() : "");
      } else if (res.stale_cause == co::StaleCause::Expired) {
        count(&co::ArenaCounters::expired);
        ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, r,
                      "RCACHE0028 entry older than RCacheMaxAge %lld s, or stored in the future "
                      "(first stored %lld s ago): erased, forwarded",
                      (long long)pol.max_age_s,
                      (long long)((double(q.now_us) - double(res.entry->stored_at_us)) / 1e6));
      } else {
        count(&co::ArenaCounters::stale_rejects);
        // A peer's stale copy was invalidated at the directory by decide_hit_coop; our own is
        // erased locally and dropped at the directory here, so peers do not read it again.
        if (from_peer)
          g.arena->counters().coop.remote_stale.fetch_add(1, std::memory_order_relaxed);
        else if (c.coop_cache)
          c.coop_cache->invalidate(res.key_hash, res.key);
        ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, r,
                      "RCACHE0026 stale entry (stored version %" APR_UINT64_T_FMT ", home %s has %" APR_UINT64_T_FMT "): erased, "
                      "forwarded",
                      (apr_uint64_t)res.entry->tag.version, home, (apr_uint64_t)*res.home_version);
      }
      return DECLINED;
    case co::Verdict::Hit:
      break;
  }
  auto resp = rc::parse_response(res.entry->payload);  // servable: checked by decide_hit
  ap_filter_t* next = below_capture_point(r);
  if (!resp || !next) {
    count(&co::ArenaCounters::misses);
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r,
                  "RCACHE0029 a current entry cannot be served (%s): forwarded",
                  !resp ? "unreadable payload" : "RCACHE_OUT is not in the output filter chain");
    return DECLINED;
  }
  count(&co::ArenaCounters::hits);
  ctx->mode = Mode::Hit;
  if (from_peer) {
    g.arena->counters().coop.remote_hits.fetch_add(1, std::memory_order_relaxed);
    for (const auto& f : res.fetched) c.coop_cache->keep_fetched(f);
  }
  ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, r, "RCACHE0027 hit (version %" APR_UINT64_T_FMT " at %s%s%s)",
                (apr_uint64_t)*res.home_version, home, from_peer ? ", copy read from " : "",
                from_peer ? res.peer.c_str() : "");
  return serve_hit(r, next, *res.entry, *resp);
}

int rcache_handler(request_rec* r) {
  if (r->handler && !std::strcmp(r->handler, "rcache-status")) return rcache_status_page(r, false);
  if (r->handler && !std::strcmp(r->handler, "rcache-metrics")) return rcache_status_page(r, true);
  if (!g.arena || !g_child || r->main || r->prev) return DECLINED;
  if (!rc::cache_enabled(dconf(r)->enabled)) return DECLINED;
  if (!strips_everything(r->server)) strip_protocol_headers(r->pool, r->headers_in);

  rc::Policy pol = policy_of(r->server);
  rc::RequestFacts facts;
  facts.method = r->method ? r->method : "";
  facts.subrequest = r->main || r->prev;
  facts.authorization = apr_table_get(r->headers_in, "Authorization") != nullptr;
  facts.cache_control = joined(r->headers_in, "Cache-Control");
  facts.pragma = joined(r->headers_in, "Pragma");
  rc::RequestAction action = rc::decide_request(facts, pol);
  if (action == rc::RequestAction::Pass) {
    ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, r, "RCACHE0021 not a cacheable request: forwarded");
    return DECLINED;
  }

  auto* ctx = pool_new<RequestCtx>(r->pool);
  ap_set_module_config(r->request_config, &rcache_module, ctx);
  ctx->base = request_base_key(r);
  ctx->base_hash = co::hash64(ctx->base);

  if (action == rc::RequestAction::Lookup) {
    ctx->home = home_index(ctx->base_hash);
    count_home(ctx->home, &co::ArenaCounters::Home::lookups);
    if (lookup_and_adapt(r, ctx, pol) == OK) {  // served from the cache: a hit
      count_home(ctx->home, &co::ArenaCounters::Home::hits);
      return OK;
    }
  } else {
    count(&co::ArenaCounters::misses);
  }

  ctx->mode = Mode::Candidate;
  apr_table_setn(r->headers_in, "Tierce-Key",
                 apr_pstrdup(r->pool, co::to_hex(ctx->base_hash).c_str()));
  return DECLINED;
}

// ---- output filter -------------------------------------------------------------------------------

struct FilterState {
  bool storing = false;
  std::string body;
  rc::StoredResponse resp;  // status, type, headers captured at the first call
  rc::Cacheability c;
  const char* content_length = nullptr;
};

void insert_filter(request_rec* r) {
  if (r->main) return;
  ap_add_output_filter(kFilterName, nullptr, r, r->connection);
}

// Gives up storing (the response still goes to the client unchanged).
void refuse_store(request_rec* r, FilterState* st, const std::string& why) {
  st->storing = false;
  count(&co::ArenaCounters::store_refused);
  ap_log_rerror(APLOG_MARK, APLOG_DEBUG, 0, r, "RCACHE0030 %s: not stored", why.c_str());
}

void finish_store(request_rec* r, RequestCtx* ctx, FilterState* st) {
  rc::BodyEnd end;
  end.connection_aborted = r->connection->aborted;
  end.no_cache = r->no_cache;
  if (st->content_length) end.content_length = std::strtoull(st->content_length, nullptr, 10);
  end.body_bytes = st->body.size();
  if (std::string why = rc::incomplete_body(end); !why.empty()) return refuse_store(r, st, why);
  st->storing = false;
  st->resp.body = std::move(st->body);
  co::Tag tag{st->c.home, st->c.tag.slot, st->c.tag.version};
  // The arena counts its own stores and refusals (too large, lock timeout); only a throw is
  // counted here.
  bool ok = false;
  // Stores one entry and, with RCacheCoop, publishes the copy at the key's directory home.
  auto put = [&](uint64_t h, const std::string& key, const std::string& payload) {
    if (g_child->coop_cache) return g_child->coop_cache->store(h, key, tag, payload);
    return g.arena->store(h, key, tag, payload);
  };
  try {
    if (st->c.vary.empty()) {
      ok = put(ctx->base_hash, ctx->base, rc::serialize_response(st->resp));
    } else {
      std::string vk = co::variant_key(ctx->base, rc::vary_values(st->c.vary, [r](const std::string& n) {
                                         return request_header(r, n);
                                       }));
      ok = put(co::hash64(vk), vk, rc::serialize_response(st->resp)) &&
           put(ctx->base_hash, ctx->base, rc::serialize_vary(st->c.vary));
    }
  } catch (const std::exception& e) {
    ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "RCACHE0031 storing failed: %s", e.what());
    count(&co::ArenaCounters::store_refused);
    ok = false;
  }
  ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, r, "RCACHE0032 %s %s (%" APR_SIZE_T_FMT " body bytes, %s slot %" APR_UINT64_T_FMT " version %" APR_UINT64_T_FMT ")",
                ok ? "stored" : "arena refused", co::to_hex(ctx->base_hash).c_str(),
                st->resp.body.size(), st->c.tag.node.c_str(), (apr_uint64_t)st->c.tag.slot,
                (apr_uint64_t)st->c.tag.version);
}

apr_status_t rcache_out_filter(ap_filter_t* f, apr_bucket_brigade* bb) {
  request_rec* r = f->r;
  auto* st = static_cast<FilterState*>(f->ctx);
  auto* ctx = static_cast<RequestCtx*>(ap_get_module_config(r->request_config, &rcache_module));
  if (!st) {
    st = pool_new<FilterState>(r->pool);
    f->ctx = st;
    if (ctx && ctx->mode == Mode::Candidate && g.arena) {
      rc::ResponseFacts rf;
      rf.key_hash = ctx->base_hash;
      rf.request_is_get = r->method_number == M_GET && !r->header_only;
      rf.request_authorized = apr_table_get(r->headers_in, "Authorization") != nullptr;
      rf.request_cookie = apr_table_get(r->headers_in, "Cookie") != nullptr;
      rf.request_no_store = rc::parse_cache_control(joined(r->headers_in, "Cache-Control")).no_store;
      rf.status = r->status;
      if (const char* t = apr_table_get(r->headers_out, "Tierce-Tag")) rf.tag = t;
      else if (const char* t2 = apr_table_get(r->err_headers_out, "Tierce-Tag")) rf.tag = t2;
      rf.cache_control = joined(r->headers_out, "Cache-Control");
      std::string ecc = joined(r->err_headers_out, "Cache-Control");
      if (!ecc.empty()) rf.cache_control += (rf.cache_control.empty() ? "" : ", ") + ecc;
      rf.set_cookie = apr_table_get(r->headers_out, "Set-Cookie") ||
                      apr_table_get(r->err_headers_out, "Set-Cookie");
      rf.vary = joined(r->headers_out, "Vary");
      st->c = rc::decide_response(rf, policy_of(r->server), g.cfg.topo);
      if (st->c.cacheable) {
        st->storing = true;
        st->resp.status = r->status;
        st->resp.content_type = r->content_type ? r->content_type : "";
        st->resp.headers = rc::headers_to_store(table_to_headers(r->headers_out),
                                                policy_of(r->server).store_set_cookie);
        if (const char* cl = apr_table_get(r->headers_out, "Content-Length"))
          st->content_length = apr_pstrdup(r->pool, cl);
      } else if (st->c.binding != co::TagBinding::Bound) {
        count(&co::ArenaCounters::uncacheable);
        count(&co::ArenaCounters::tag_mismatches);
        ap_log_rerror(APLOG_MARK, APLOG_WARNING, 0, r, "RCACHE0035 not stored: %s",
                      st->c.reason.c_str());
      } else {
        count(&co::ArenaCounters::uncacheable);
        ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, r, "RCACHE0033 not cacheable: %s",
                      st->c.reason.c_str());
      }
    }
    if (strips_everything(r->server) || rc::cache_enabled(dconf(r)->enabled)) {
      strip_protocol_headers(r->pool, r->headers_out);
      strip_protocol_headers(r->pool, r->err_headers_out);
    }
  }
  if (!st->storing) {
    ap_remove_output_filter(f);
    return ap_pass_brigade(f->next, bb);
  }
  for (apr_bucket* e = APR_BRIGADE_FIRST(bb); e != APR_BRIGADE_SENTINEL(bb); e = APR_BUCKET_NEXT(e)) {
    if (APR_BUCKET_IS_EOS(e)) {
      finish_store(r, ctx, st);
      break;
    }
    if (AP_BUCKET_IS_ERROR(e)) {  // e.g. mod_proxy_http: the backend broke the body off
      rc::BodyEnd end;
      end.error_bucket = true;
      refuse_store(r, st, rc::incomplete_body(end));
      break;
    }
    if (APR_BUCKET_IS_METADATA(e)) continue;
    const char* data = nullptr;
    apr_size_t len = 0;
    apr_status_t rv = apr_bucket_read(e, &data, &len, APR_BLOCK_READ);
    if (rv != APR_SUCCESS) {
      refuse_store(r, st, "reading the body failed");
      break;
    }
    if (st->body.size() + len > g.cfg.max_entry) {
      st->storing = false;
      count(&co::ArenaCounters::store_refused);
      ap_log_rerror(APLOG_MARK, APLOG_TRACE1, 0, r,
                    "RCACHE0034 response larger than RCacheMaxEntrySize (%" APR_UINT64_T_FMT "): passed through, "
                    "not stored",
                    (apr_uint64_t)g.cfg.max_entry);
      break;
    }
    st->body.append(data, len);
  }
  if (!st->storing) {
    std::string().swap(st->body);
    ap_remove_output_filter(f);
  }
  return ap_pass_brigade(f->next, bb);
}

// ---- status pages ----------------------------------------------------------------------------------

int rcache_status_page(request_rec* r, bool metrics) {
  if (r->method_number != M_GET) {
    r->allowed = AP_METHOD_BIT << M_GET;
    return HTTP_METHOD_NOT_ALLOWED;
  }
  const rc::StatusSnapshot s =
      rc::status_snapshot(g.cfg, g.arena, g_child ? g_child->home_state.get() : nullptr);
  std::string body;
  if (metrics) {
    ap_set_content_type(r, "text/plain; version=0.0.4; charset=utf-8");
    body = rc::render_metrics(s);
  } else if (r->args && !std::strcmp(r->args, "auto")) {
    ap_set_content_type(r, "text/plain; charset=utf-8");
    body = rc::render_status_auto(s);
  } else {
    ap_set_content_type(r, "text/html; charset=utf-8");
    body = rc::render_status_html(s);
  }
  apr_table_setn(r->headers_out, "Cache-Control", "no-store");
  ap_set_content_length(r, apr_off_t(body.size()));
  if (!r->header_only) ap_rwrite(body.data(), int(body.size()), r);
  return OK;
}

void register_hooks(apr_pool_t*) {
  ap_hook_pre_config(rcache_pre_config, nullptr, nullptr, APR_HOOK_MIDDLE);
  ap_hook_check_config(rcache_check_config, nullptr, nullptr, APR_HOOK_MIDDLE);
  ap_hook_post_config(rcache_post_config, nullptr, nullptr, APR_HOOK_MIDDLE);
  ap_hook_child_init(rcache_child_init, nullptr, nullptr, APR_HOOK_MIDDLE);
  ap_hook_post_read_request(rcache_post_read_request, nullptr, nullptr, APR_HOOK_REALLY_FIRST);
  ap_hook_handler(rcache_handler, nullptr, nullptr, APR_HOOK_REALLY_FIRST);
  ap_hook_insert_filter(insert_filter, nullptr, nullptr, APR_HOOK_MIDDLE);
  ap_hook_insert_error_filter(insert_filter, nullptr, nullptr, APR_HOOK_MIDDLE);
  g_out_filter =
      ap_register_output_filter(kFilterName, rcache_out_filter, nullptr, AP_FTYPE_CONTENT_SET);
}

}  // namespace

extern "C" {
module AP_MODULE_DECLARE_DATA rcache_module = {
    STANDARD20_MODULE_STUFF,
    create_dir_conf,
    merge_dir_conf,
    create_server_conf,
    merge_server_conf,
    rcache_cmds,
    register_hooks,
#if defined(AP_MODULE_FLAG_NONE)
    AP_MODULE_FLAG_NONE
#endif
};
}
