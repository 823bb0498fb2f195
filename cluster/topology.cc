// cluster/topology.cc — reading and checking the cluster topology file (see topology.h).
#include "cluster/topology.h"

#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "base/config.h"
#include "cluster/hash.h"

namespace tierce::cluster {
namespace {

class Reader {
 public:
  explicit Reader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void fail(const toml::node* n, const std::string& msg) const {
    std::string where = origin_;
    if (n && n->source().begin.line > 0) where += ":" + std::to_string(n->source().begin.line);
    throw TopologyError(where + ": " + msg);
  }
  [[noreturn]] void fail(const toml::source_region& r, const std::string& msg) const {
    std::string where = origin_;
    if (r.begin.line > 0) where += ":" + std::to_string(r.begin.line);
    throw TopologyError(where + ": " + msg);
  }

  void only(const toml::table& t, const std::string& where, std::set<std::string_view> keys) {
    std::vector<std::string_view> known(keys.begin(), keys.end());
    auto unknown = base::unknown_keys(t, known);
    if (unknown.empty()) return;
    const auto& u = unknown.front();
    fail(u.where, where + " " + u.key + ": unknown key" +
                      (u.suggestion.empty() ? "" : "; did you mean '" + u.suggestion + "'?") +
                      " (" + where + " knows: " + base::join(known, ", ") + ")");
  }
  std::optional<std::string> str(const toml::table& t, const std::string& where,
                                 std::string_view key) {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    if (!n->is_string()) fail(n, where + " " + std::string(key) + ": expected a string");
    return n->as_string()->get();
  }
  std::optional<int64_t> integer(const toml::table& t, const std::string& where,
                                 std::string_view key, int64_t lo, int64_t hi) {
    const toml::node* n = t.get(key);
    if (!n) return std::nullopt;
    if (!n->is_integer()) fail(n, where + " " + std::string(key) + ": expected an integer");
    int64_t v = n->as_integer()->get();
    if (v < lo || v > hi)
      fail(n, where + " " + std::string(key) + ": " + std::to_string(v) + " is out of range " +
                  std::to_string(lo) + ".." + std::to_string(hi));
    return v;
  }

 private:
  std::string origin_;
};

bool valid_name(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

// "schema.table": two SQL identifiers of letters, digits and '_' (they are spliced into SQL).
bool valid_sql_table(std::string_view s) {
  auto dot = s.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == s.size() || s.size() > 120) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
         }) && s.find('.', dot + 1) == std::string_view::npos;
}

// [cluster]: name, secret_file, transport and the fabric's sizes.
void read_cluster(Reader& r, const toml::table& root, const std::string& origin, Topology& t) {
  const toml::table* c = root["cluster"].as_table();
  if (!c) throw TopologyError(origin + ": missing [cluster] table (name, secret_file, transport)");
  r.only(*c, "[cluster]",
         {"name", "secret_file", "transport", "version_slots", "op_timeout_ms"});
  t.name = r.str(*c, "[cluster]", "name").value_or("tierce");
  if (!valid_name(t.name)) r.fail(c->get("name"), "[cluster] name: use letters, digits, - _ .");
  auto secret = r.str(*c, "[cluster]", "secret_file");
  if (!secret || secret->empty())
    throw TopologyError(origin + ": [cluster] secret_file is required (the fabric secret)");
  t.secret_file = *secret;
  if (auto tr = r.str(*c, "[cluster]", "transport")) {
    try {
      t.transport = fabric::parse_transport(*tr);
    } catch (const std::exception& e) {
      r.fail(c->get("transport"), std::string("[cluster] transport: ") + e.what());
    }
  }
  if (auto v = r.integer(*c, "[cluster]", "version_slots", 1, int64_t(1) << 28))
    t.version_slots = uint64_t(*v);
  if (auto v = r.integer(*c, "[cluster]", "op_timeout_ms", 1, 60000)) t.op_timeout_ms = uint32_t(*v);
}

// [coherence] (optional).
void read_coherence(Reader& r, const toml::table& root, Topology& t) {
  if (const toml::node* cn = root.get("coherence")) {
    if (!cn->is_table()) r.fail(cn, "[coherence] must be a table");
    const toml::table& ct = *cn->as_table();
    r.only(ct, "[coherence]", {"scheme", "lease_ms", "clock_skew_ms"});
    if (auto sc = r.str(ct, "[coherence]", "scheme")) {
      try {
        t.coherence.scheme = parse_scheme(*sc);
      } catch (const std::exception& e) {
        r.fail(ct.get("scheme"), std::string("[coherence] scheme: ") + e.what());
      }
    }
    if (auto v = r.integer(ct, "[coherence]", "lease_ms", 100, 600000))
      t.coherence.lease_ms = uint32_t(*v);
    if (auto v = r.integer(ct, "[coherence]", "clock_skew_ms", 0, 60000))
      t.coherence.clock_skew_ms = uint32_t(*v);
  }
}

// [arbiter] (optional), checked against [coherence] lease_ms.
void read_arbiter(Reader& r, const toml::table& root, const std::string& origin, Topology& t) {
  if (const toml::node* an = root.get("arbiter")) {
    if (!an->is_table()) r.fail(an, "[arbiter] must be a table");
    const toml::table& at = *an->as_table();
    r.only(at, "[arbiter]",
           {"table", "host", "port", "socket", "user", "password_file", "drop_after_ms"});
    auto table = r.str(at, "[arbiter]", "table");
    if (!table || !valid_sql_table(*table))
      r.fail(at.get("table") ? at.get("table") : an,
             "[arbiter] table: required, \"schema.table\" (letters, digits, '_')");
    t.arbiter.table = *table;
    if (auto v = r.str(at, "[arbiter]", "host")) t.arbiter.host = *v;
    if (auto v = r.integer(at, "[arbiter]", "port", 1, 65535)) t.arbiter.port = uint32_t(*v);
    if (auto v = r.str(at, "[arbiter]", "socket")) t.arbiter.socket = *v;
    if (auto v = r.str(at, "[arbiter]", "user")) t.arbiter.user = *v;
    if (auto v = r.str(at, "[arbiter]", "password_file")) t.arbiter.password_file = *v;
    if (auto v = r.integer(at, "[arbiter]", "drop_after_ms", 100, 3600000))
      t.arbiter.drop_after_ms = uint32_t(*v);
  }
  if (t.arbiter.enabled() && t.arbiter_drop_after_ms() < 2 * t.coherence.lease_ms)
    throw TopologyError(origin + ": [arbiter] drop_after_ms (" +
                        std::to_string(t.arbiter.drop_after_ms) +
                        ") must be at least 2 x [coherence] lease_ms (" +
                        std::to_string(t.coherence.lease_ms) +
                        "): a home would drop a node for one slow renewal");
}

// [dlm] (optional).
void read_dlm(Reader& r, const toml::table& root, Topology& t) {
  if (const toml::node* dn = root.get("dlm")) {
    if (!dn->is_table()) r.fail(dn, "[dlm] must be a table");
    const toml::table& d = *dn->as_table();
    r.only(d, "[dlm]", {"algorithm", "transport", "heartbeat_ms", "lease_ms", "lock_slots"});
    if (auto a = r.str(d, "[dlm]", "algorithm")) {
      if (*a == "ncosed") t.dlm.algorithm = LockAlgorithm::NCoSED;
      else if (*a == "dqnl") t.dlm.algorithm = LockAlgorithm::DQNL;
      else if (*a == "srsl") t.dlm.algorithm = LockAlgorithm::SRSL;
      else r.fail(d.get("algorithm"), "[dlm] algorithm: \"" + *a + "\" is not ncosed, dqnl or srsl");
    }
    if (auto tr = r.str(d, "[dlm]", "transport")) {
      try {
        t.dlm.transport = fabric::parse_transport(*tr);
      } catch (const std::exception& e) {
        r.fail(d.get("transport"), std::string("[dlm] transport: ") + e.what());
      }
    }
    if (auto v = r.integer(d, "[dlm]", "heartbeat_ms", 1, 60000)) t.dlm.heartbeat_ms = uint32_t(*v);
    if (auto v = r.integer(d, "[dlm]", "lease_ms", 10, 600000)) t.dlm.lease_ms = uint32_t(*v);
    if (t.dlm.lease_ms < 3 * t.dlm.heartbeat_ms)
      r.fail(d.get("lease_ms") ? d.get("lease_ms") : dn,
             "[dlm] lease_ms must be at least 3 x heartbeat_ms (" +
                 std::to_string(t.dlm.heartbeat_ms) + "), or one late heartbeat kills a node");
    if (auto v = r.integer(d, "[dlm]", "lock_slots", 16, int64_t(1) << 24)) t.dlm.lock_slots = uint32_t(*v);
  }
}

// One [[node]] table; `names` are those of the nodes before it.
NodeInfo read_node(Reader& r, const toml::node& el, const Topology& t,
                   std::set<std::string>& names) {
  const toml::table& nt = *el.as_table();
  r.only(nt, "[[node]]", {"name", "role", "memd", "lockd", "writer", "segment_prefix", "public_key"});
  NodeInfo n;
  auto name = r.str(nt, "[[node]]", "name");
  if (!name || !valid_name(*name))
    r.fail(&el, "[[node]] name: required, 1..64 letters, digits, '-', '_' or '.'");
  n.name = *name;
  if (!names.insert(n.name).second) r.fail(&el, "[[node]] name \"" + n.name + "\" is repeated");
  auto role = r.str(nt, "[[node]]", "role").value_or("app");
  if (role == "app") n.role = Role::App;
  else if (role == "proxy") n.role = Role::Proxy;
  else r.fail(nt.get("role"), "[[node]] role: \"" + role + "\" is not app or proxy");
  auto uris = [&](std::string_view key, std::vector<std::string>* out) {
    const toml::node* m = nt.get(key);
    if (!m) return;
    if (!m->is_array() || m->as_array()->empty())
      r.fail(m, "[[node]] " + n.name + " " + std::string(key) +
                    ": a list of URIs, e.g. [\"tcp://HOST:PORT\", \"shm:///path.sock\"]");
    for (const auto& u : *m->as_array()) {
      if (!u.is_string()) r.fail(&u, "[[node]] " + std::string(key) + ": URIs are strings");
      std::string uri = u.as_string()->get();
      try {
        (void)fabric::parse_address(uri);
      } catch (const std::exception& e) {
        r.fail(&u, "[[node]] " + n.name + " " + std::string(key) + ": " + e.what());
      }
      out->push_back(uri);
    }
  };
  uris("memd", &n.memd);
  uris("lockd", &n.lockd);
  uris("writer", &n.writer);
  if (!n.writer.empty() && n.role != Role::App)
    r.fail(nt.get("writer"), "[[node]] " + n.name +
                                 " writer: only app nodes number invalidations (remove it, or "
                                 "make the node role = \"app\")");
  if (n.memd.empty() && n.lockd.empty())
    r.fail(&el, "[[node]] " + n.name +
                    ": memd = [\"tcp://HOST:PORT\", \"shm:///path.sock\"] is required (or lockd "
                    "for a lock-manager-only node)");
  n.segment_prefix = r.str(nt, "[[node]]", "segment_prefix").value_or("/tierce." + t.name + "." + n.name);
  if (n.segment_prefix.size() < 2 || n.segment_prefix[0] != '/' ||
      n.segment_prefix.find('/', 1) != std::string::npos)
    r.fail(nt.get("segment_prefix"),
           "[[node]] segment_prefix: a POSIX shm name: '/' then no other '/'");
  if (auto k = r.str(nt, "[[node]]", "public_key")) {
    n.public_key = fabric::parse_public_key(*k);
    if (!n.public_key)
      r.fail(nt.get("public_key"), "[[node]] " + n.name +
                                       " public_key: \"ed25519:\" and 44 base64 characters, as "
                                       "printed by tierce-fabric keygen FILE (or pubkey FILE)");
  }
  return n;
}

}  // namespace

Topology Topology::load(const std::string& path) {
  std::string text;
  try {
    text = base::read_config_file(path);  // a regular file of at most 1 MiB
  } catch (const base::ConfigError& e) {
    throw TopologyError(std::string(e.what()) + " (the cluster topology)");
  }
  Topology t = parse(text, path);
  t.path = path;
  return t;
}

Topology Topology::parse(std::string_view text, const std::string& origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw TopologyError(origin + ":" + std::to_string(e.source().begin.line) + ": " +
                        std::string(e.description()));
  }
  Reader r(origin);
  Topology t;
  r.only(root, "topology", {"cluster", "coherence", "arbiter", "dlm", "node"});
  read_cluster(r, root, origin, t);
  read_coherence(r, root, t);
  read_arbiter(r, root, origin, t);
  read_dlm(r, root, t);
  const toml::node* nodes = root.get("node");
  if (!nodes || !nodes->is_array_of_tables())
    throw TopologyError(origin + ": no [[node]] tables: name at least one app node");
  std::set<std::string> names;
  for (const auto& el : *nodes->as_array()) t.nodes.push_back(read_node(r, el, t, names));
  // Node identity: every node has a public key, or none has. A cluster half keyed would let the
  // unkeyed nodes be impersonated by any member, which is what the keys are there to prevent.
  size_t keyed = 0;
  for (const auto& n : t.nodes) keyed += n.public_key.has_value();
  if (keyed != 0 && keyed != t.nodes.size())
    for (const auto& n : t.nodes)
      if (!n.public_key)
        throw TopologyError(origin + ": node \"" + n.name + "\" has no public_key while " +
                            std::to_string(keyed) + " other node(s) have one: give every node its "
                            "key (tierce-fabric keygen FILE), or none");
  if (t.lockd_nodes().size() > 1023)
    throw TopologyError(origin + ": at most 1023 nodes may run a lockd (ranks are 10 bits)");
  return t;
}

fabric::ClientIdentity expect(const NodeInfo& n) {
  fabric::ClientIdentity id;
  if (n.public_key) {  // a keyed cluster: the node must prove it is n
    id.expect_node = n.name;
    id.expect_key = n.public_key;
  }
  return id;
}

const NodeInfo* Topology::find(std::string_view name) const {
  for (const auto& n : nodes)
    if (n.name == name) return &n;
  return nullptr;
}

const NodeInfo& Topology::node(std::string_view name) const {
  if (auto* n = find(name)) return *n;
  throw TopologyError((path.empty() ? std::string("topology") : path) + ": no node named \"" +
                      std::string(name) + "\"");
}

std::vector<const NodeInfo*> Topology::app_nodes() const {
  std::vector<const NodeInfo*> v;
  for (const auto& n : nodes)
    if (n.role == Role::App) v.push_back(&n);
  return v;
}

void Topology::require_app_nodes() const {
  if (app_nodes().empty())
    throw TopologyError((path.empty() ? std::string("topology") : path) +
                        ": no node has role = \"app\": pages need a home");
}

namespace {
// Rendezvous hashing: the candidate with the highest hash(key, node name) wins.
const NodeInfo* rendezvous(uint64_t key_hash, const std::vector<const NodeInfo*>& candidates) {
  const NodeInfo* best = nullptr;
  uint64_t best_w = 0;
  for (const NodeInfo* n : candidates) {
    std::string s = to_hex(key_hash);
    s.push_back('@');
    s += n->name;
    uint64_t w = hash64(s);
    if (!best || w > best_w) {
      best = n;
      best_w = w;
    }
  }
  return best;
}

// The URI among `uris` for transport `want` (auto: verbs when a device is active, else shm when
// there is one, else tcp).
std::string pick_uri(const std::vector<std::string>& uris, fabric::Transport configured,
                     const std::string& file, const std::string& node, const char* agent) {
  auto pick = [&](fabric::Transport want) -> std::optional<std::string> {
    for (const auto& u : uris)
      if (fabric::parse_address(u).transport == want) return u;
    return std::nullopt;
  };
  fabric::Transport want = configured;
  if (want == fabric::Transport::Auto) {
    if (fabric::verbs_device_available())
      if (auto u = pick(fabric::Transport::Verbs)) return *u;
    if (auto u = pick(fabric::Transport::Shm)) return *u;
    want = fabric::Transport::Tcp;
  }
  if (auto u = pick(want)) return *u;
  throw TopologyError(file + ": node " + node + " has no " + std::string(fabric::to_string(want)) +
                      ":// " + agent + " address, but the transport is " +
                      std::string(fabric::to_string(configured)));
}
}  // namespace

const NodeInfo& Topology::home_of(uint64_t key_hash) const {
  auto apps = app_nodes();
  if (apps.empty()) require_app_nodes();
  return *rendezvous(key_hash, apps);
}

std::string Topology::uri_of(const NodeInfo& n) const {
  return pick_uri(n.memd, transport, path.empty() ? std::string("topology") : path, n.name, "memd");
}

std::string Topology::writer_uri_of(const NodeInfo& n) const {
  if (n.writer.empty()) return uri_of(n);
  return pick_uri(n.writer, transport, path.empty() ? std::string("topology") : path, n.name,
                  "writer");
}

std::string_view to_string(Scheme s) {
  return s == Scheme::InvalidateAll ? "invalidate-all" : "dependency-lists";
}

Scheme parse_scheme(std::string_view s) {
  if (s == "dependency-lists") return Scheme::DependencyLists;
  if (s == "invalidate-all") return Scheme::InvalidateAll;
  throw std::invalid_argument("unknown invalidation scheme \"" + std::string(s) +
                              "\": use dependency-lists or invalidate-all");
}

std::ostream& operator<<(std::ostream& o, Scheme s) { return o << to_string(s); }

uint64_t Topology::coherence_digest() const {
  std::vector<std::string> apps;
  for (const NodeInfo* n : app_nodes()) apps.push_back(n->name);
  std::sort(apps.begin(), apps.end());
  std::string s = "coherence|" + name + "|" + std::to_string(version_slots) + "|" +
                  std::string(to_string(coherence.scheme)) + "|" +
                  std::to_string(coherence.lease_ms) + "|" +
                  std::to_string(coherence.clock_skew_ms);
  for (const auto& a : apps) s += "|" + a;
  // Homes that drop lost nodes and homes that wait for them forever must not share a cluster,
  // and the writers' check must name the table the homes bump.
  if (arbiter.enabled()) s += "|arbiter|" + arbiter.table;
  return hash64(s);
}

std::string_view to_string(LockAlgorithm a) {
  switch (a) {
    case LockAlgorithm::NCoSED: return "ncosed";
    case LockAlgorithm::DQNL: return "dqnl";
    case LockAlgorithm::SRSL: return "srsl";
  }
  return "?";
}

std::vector<const NodeInfo*> Topology::lockd_nodes() const {
  std::vector<const NodeInfo*> v;
  for (const auto& n : nodes)
    if (!n.lockd.empty()) v.push_back(&n);
  return v;
}

uint32_t Topology::rank_of(std::string_view node) const {
  auto members = lockd_nodes();
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i]->name == node) return uint32_t(i + 1);
  throw TopologyError((path.empty() ? std::string("topology") : path) + ": node \"" +
                      std::string(node) + "\" has no lockd = [...] entry (not a lock manager member)");
}

const NodeInfo& Topology::lock_home_of(uint64_t name_hash) const {
  auto members = lockd_nodes();
  if (members.empty())
    throw TopologyError((path.empty() ? std::string("topology") : path) +
                        ": no node has lockd = [...]: locks need a home");
  return *rendezvous(name_hash, members);
}

std::string Topology::lockd_uri_of(const NodeInfo& n) const {
  return pick_uri(n.lockd, dlm.transport.value_or(transport),
                  path.empty() ? std::string("topology") : path, n.name, "lockd");
}

uint64_t Topology::dlm_digest() const {
  std::string s = name + "|" + std::string(to_string(dlm.algorithm)) + "|" +
                  std::to_string(dlm.lease_ms) + "|" + std::to_string(dlm.lock_slots);
  for (const NodeInfo* n : lockd_nodes()) s += "|" + n->name;
  return hash64(s);
}

fabric::Secret Topology::secret() const { return fabric::Secret::from_file(secret_file); }

std::string ArbiterSettings::password() const {
  if (password_file.empty()) return "";
  std::ifstream f(password_file);
  if (!f) throw TopologyError("[arbiter] password_file " + password_file + ": cannot read it");
  std::string pw;
  std::getline(f, pw);
  while (!pw.empty() && (pw.back() == '\r' || pw.back() == ' ')) pw.pop_back();
  return pw;
}

}  // namespace tierce::cluster
