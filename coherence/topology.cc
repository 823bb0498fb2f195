// coherence/topology.cc — reading and checking the cluster topology file (see topology.h).
#include "coherence/topology.h"

#include <toml++/toml.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "coherence/key.h"

namespace tierce::coherence {
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
    for (auto&& [k, v] : t) {
      (void)v;
      if (!keys.count(k.str())) {
        std::string known;
        for (auto x : keys) known += (known.empty() ? "" : ", ") + std::string(x);
        fail(k.source(), where + " " + std::string(k.str()) + ": unknown key (" + where +
                             " knows: " + known + ")");
      }
    }
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

}  // namespace

Topology Topology::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw TopologyError(path + ": cannot read the topology file (does it exist?)");
  std::stringstream ss;
  ss << in.rdbuf();
  Topology t = parse(ss.str(), path);
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
  r.only(root, "topology", {"cluster", "node"});
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

  const toml::node* nodes = root.get("node");
  if (!nodes || !nodes->is_array_of_tables())
    throw TopologyError(origin + ": no [[node]] tables: name at least one app node");
  std::set<std::string> names;
  for (const auto& el : *nodes->as_array()) {
    const toml::table& nt = *el.as_table();
    r.only(nt, "[[node]]", {"name", "role", "memd", "segment_prefix"});
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
    const toml::node* m = nt.get("memd");
    if (!m || !m->is_array() || m->as_array()->empty())
      r.fail(&el, "[[node]] " + n.name +
                      ": memd = [\"tcp://HOST:PORT\", \"shm:///path.sock\"] is required");
    for (const auto& u : *m->as_array()) {
      if (!u.is_string()) r.fail(&u, "[[node]] memd: URIs are strings");
      std::string uri = u.as_string()->get();
      try {
        (void)fabric::parse_address(uri);
      } catch (const std::exception& e) {
        r.fail(&u, "[[node]] " + n.name + " memd: " + e.what());
      }
      n.memd.push_back(uri);
    }
    n.segment_prefix = r.str(nt, "[[node]]", "segment_prefix").value_or("/tierce." + t.name + "." + n.name);
    if (n.segment_prefix.size() < 2 || n.segment_prefix[0] != '/' ||
        n.segment_prefix.find('/', 1) != std::string::npos)
      r.fail(nt.get("segment_prefix"),
             "[[node]] segment_prefix: a POSIX shm name: '/' then no other '/'");
    t.nodes.push_back(std::move(n));
  }
  if (t.app_nodes().empty())
    throw TopologyError(origin + ": no node has role = \"app\": pages need a home");
  return t;
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

const NodeInfo& Topology::home_of(uint64_t key_hash) const {
  // Rendezvous hashing: the app node with the highest hash(key, node) wins.
  const NodeInfo* best = nullptr;
  uint64_t best_w = 0;
  for (const auto& n : nodes) {
    if (n.role != Role::App) continue;
    std::string s = to_hex(key_hash);
    s.push_back('@');
    s += n.name;
    uint64_t w = hash64(s);
    if (!best || w > best_w) {
      best = &n;
      best_w = w;
    }
  }
  return *best;
}

std::string Topology::uri_of(const NodeInfo& n) const {
  auto pick = [&](fabric::Transport want) -> std::optional<std::string> {
    for (const auto& u : n.memd)
      if (fabric::parse_address(u).transport == want) return u;
    return std::nullopt;
  };
  fabric::Transport want = transport;
  if (want == fabric::Transport::Auto) {
    if (fabric::verbs_device_available())
      if (auto u = pick(fabric::Transport::Verbs)) return *u;
    if (auto u = pick(fabric::Transport::Shm)) return *u;
    want = fabric::Transport::Tcp;
  }
  if (auto u = pick(want)) return *u;
  throw TopologyError((path.empty() ? std::string("topology") : path) + ": node " + n.name +
                      " has no " + std::string(fabric::to_string(want)) +
                      ":// memd address, but the cluster transport is " +
                      std::string(fabric::to_string(transport)));
}

fabric::Secret Topology::secret() const { return fabric::Secret::from_file(secret_file); }

}  // namespace tierce::coherence
