// php_ext/db_check.cc — see db_check.h.
#include "php_ext/db_check.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace tierce::php {

namespace {

std::string lower(std::string_view s) {
  std::string o(s);
  std::transform(o.begin(), o.end(), o.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return o;
}

bool contains_ci(std::string_view hay, std::string_view needle) {
  return lower(hay).find(lower(needle)) != std::string::npos;
}

const std::string* var(const ServerFacts& f, const char* name) {
  auto it = f.variables.find(name);
  return it == f.variables.end() ? nullptr : &it->second;
}

bool on(const std::string* v) {
  if (!v) return false;
  std::string s = lower(*v);
  return s == "on" || s == "1" || s == "yes" || s == "true";
}

}  // namespace

std::string_view id_of(DbFinding f) {
  switch (f) {
    case DbFinding::ReadOnly:
      return "PHPEXT0201";
    case DbFinding::InnodbReadOnly:
      return "PHPEXT0202";
    case DbFinding::GaleraWithoutCausalReads:
      return "PHPEXT0203";
    case DbFinding::ProxySql:
      return "PHPEXT0204";
    case DbFinding::MaxScale:
      return "PHPEXT0205";
    case DbFinding::OtherProxy:
      return "PHPEXT0206";
  }
  return "PHPEXT0200";
}

std::string describe(DbFinding f, const ServerFacts& facts) {
  switch (f) {
    case DbFinding::ReadOnly:
      return "the database server is read-only (@@read_only or @@super_read_only ON): a replica, "
             "which applies a committed update later than the primary";
    case DbFinding::InnodbReadOnly:
      return "the database server runs with @@innodb_read_only ON: a read-only copy of the data";
    case DbFinding::GaleraWithoutCausalReads:
      return "the database is a Galera node (@@wsrep_on ON) without causal reads "
             "(@@wsrep_sync_wait "
             "= " +
             (var(facts, "wsrep_sync_wait") ? *var(facts, "wsrep_sync_wait") : std::string("0")) +
             ", bit 1 clear): a read may miss an update another node committed; set "
             "wsrep_sync_wait = 1 (or a value with bit 1)";
    case DbFinding::ProxySql:
      return "the connection goes through ProxySQL (it answered '" +
             facts.probe_comment.value_or("") +
             "'), which may send reads to a replica (read/write splitting)";
    case DbFinding::MaxScale:
      return "the connection goes through MaxScale (version '" + facts.handshake_version +
             "'), which may send reads to a replica (readwritesplit)";
    case DbFinding::OtherProxy:
      return "something between PHP and the database answered the connection's version_comment ('" +
             facts.probe_comment.value_or("") + "', the server says '" +
             (var(facts, "version_comment") ? *var(facts, "version_comment") : std::string()) +
             "'): a proxy, which may send reads to a replica";
  }
  return "";
}

std::vector<DbFinding> judge(const ServerFacts& f) {
  std::vector<DbFinding> out;
  if (on(var(f, "read_only")) || on(var(f, "super_read_only"))) out.push_back(DbFinding::ReadOnly);
  if (on(var(f, "innodb_read_only"))) out.push_back(DbFinding::InnodbReadOnly);
  if (on(var(f, "wsrep_on"))) {
    const std::string* w = var(f, "wsrep_sync_wait");
    unsigned long bits = w ? std::strtoul(w->c_str(), nullptr, 10) : 0;
    if ((bits & 1u) == 0) out.push_back(DbFinding::GaleraWithoutCausalReads);
  }
  bool proxysql = (f.probe_comment && contains_ci(*f.probe_comment, "proxysql")) ||
                  contains_ci(f.handshake_version, "proxysql");
  if (proxysql) out.push_back(DbFinding::ProxySql);
  const std::string* version = var(f, "version");
  bool maxscale = contains_ci(f.handshake_version, "maxscale") ||
                  (version && contains_ci(*version, "maxscale"));
  if (maxscale) out.push_back(DbFinding::MaxScale);
  // The probe was answered by something other than the server whose variables we read.
  const std::string* comment = var(f, "version_comment");
  if (!proxysql && !maxscale && f.probe_comment && comment && *f.probe_comment != *comment)
    out.push_back(DbFinding::OtherProxy);
  return out;
}

std::string not_primary_warning(DbFinding f, const ServerFacts& facts, std::string_view server) {
  return std::string(id_of(f)) + " " + describe(f, facts) + " (" + std::string(server) +
         "). Tierce needs the pages it caches to be rendered from the primary "
         "(docs/coherence.md, \"What the database must give\"): pages that use this "
         "connection are not cached. Set tierce.db_check = 0 only if every read "
         "really goes to the primary. Logged once per process.";
}

}  // namespace tierce::php
