// ftp_adts/client/listing.cc — LIST and MLSD line parsing (listing.h).
#include "ftp_adts/client/listing.h"

#include <cctype>
#include <cstring>

#include "ftp_adts/ftp/protocol.h"

namespace tierce::ftpc {
namespace {

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::optional<uint64_t> to_u64(std::string_view s) {
  if (!all_digits(s) || s.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) v = v * 10 + uint64_t(c - '0');
  return v;
}

int month_index(std::string_view m) {
  static const char* kMonths[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                  "jul", "aug", "sep", "oct", "nov", "dec"};
  if (m.size() != 3) return -1;
  for (int i = 0; i < 12; ++i) {
    bool eq = true;
    for (int k = 0; k < 3; ++k)
      if (std::tolower(static_cast<unsigned char>(m[k])) != kMonths[i][k]) eq = false;
    if (eq) return i;
  }
  return -1;
}

// A token with its position in the line, so the name can be taken verbatim (spaces included).
struct Tok {
  std::string_view text;
  size_t end;  // index just past the token
};

std::vector<Tok> tokens(std::string_view line, size_t max) {
  std::vector<Tok> out;
  size_t i = 0;
  while (i < line.size() && out.size() < max) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t b = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > b) out.push_back(Tok{line.substr(b, i - b), i});
  }
  return out;
}

std::time_t utc(int year, int mon, int day, int hour, int min) {
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = mon;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = min;
  return timegm(&tm);
}

std::optional<RemoteEntry> parse_dos(std::string_view line) {
  // "01-03-24  10:00AM       <DIR>          dir" / "01-03-2024  10:00PM  1234 file name"
  auto t = tokens(line, 3);
  if (t.size() < 3) return std::nullopt;
  std::string_view d = t[0].text, tm = t[1].text;
  if (d.size() != 8 && d.size() != 10) return std::nullopt;
  if (d[2] != '-' || d[5] != '-') return std::nullopt;
  auto mo = to_u64(d.substr(0, 2)), da = to_u64(d.substr(3, 2)), yr = to_u64(d.substr(6));
  if (!mo || !da || !yr || *mo < 1 || *mo > 12 || *da < 1 || *da > 31) return std::nullopt;
  int year = int(*yr);
  if (d.size() == 8) year += year < 70 ? 2000 : 1900;
  if (tm.size() != 7 || tm[2] != ':') return std::nullopt;
  auto hh = to_u64(tm.substr(0, 2)), mm = to_u64(tm.substr(3, 2));
  if (!hh || !mm || *hh > 12 || *mm > 59) return std::nullopt;
  int hour = int(*hh) % 12;
  char ampm = char(std::toupper(static_cast<unsigned char>(tm[5])));
  if (ampm == 'P') hour += 12;
  else if (ampm != 'A') return std::nullopt;
  RemoteEntry e;
  if (t[2].text == "<DIR>") {
    e.type = EntryType::Dir;
  } else if (auto sz = to_u64(t[2].text)) {
    e.type = EntryType::File;
    e.size = *sz;
  } else {
    return std::nullopt;
  }
  size_t p = t[2].end;
  while (p < line.size() && line[p] == ' ') ++p;
  e.name = std::string(line.substr(p));
  if (e.name.empty()) return std::nullopt;
  e.mtime = utc(year, int(*mo) - 1, int(*da), hour, int(*mm));
  e.mtime_precision = 60;
  return e;
}

}  // namespace

bool safe_name(std::string_view name) {
  if (name.empty() || name == "." || name == "..") return false;
  for (char c : name)
    if (c == '/' || c == '\0' || c == '\r' || c == '\n') return false;
  return true;
}

std::optional<RemoteEntry> parse_list_line(std::string_view line, std::time_t now) {
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (line.empty()) return std::nullopt;
  if (std::isdigit(static_cast<unsigned char>(line[0]))) return parse_dos(line);
  if (line.rfind("total ", 0) == 0) return std::nullopt;
  RemoteEntry e;
  switch (line[0]) {
    case '-': e.type = EntryType::File; break;
    case 'd': e.type = EntryType::Dir; break;
    case 'l': e.type = EntryType::Link; break;
    case 'b': case 'c': case 'p': case 's': case 'D': e.type = EntryType::Other; break;
    default: return std::nullopt;
  }
  // perms links owner [group] size Mon DD HH:MM|YYYY name. Find the month: the first token after
  // the permissions that is a month name, preceded by a size and followed by a day and a
  // time/year. Owner and group may be missing or be numbers; names of users may even look like
  // months, so we take the last candidate that fits within the first 9 tokens.
  auto t = tokens(line, 9);
  int found = -1;
  for (size_t m = 2; m + 2 < t.size(); ++m) {
    if (month_index(t[m].text) < 0 || !to_u64(t[m - 1].text)) continue;
    auto day = to_u64(t[m + 1].text);
    if (!day || *day < 1 || *day > 31) continue;
    std::string_view ty = t[m + 2].text;
    bool is_time = ty.size() == 5 && ty[2] == ':' && all_digits(ty.substr(0, 2)) &&
                   all_digits(ty.substr(3));
    bool is_year = ty.size() == 4 && all_digits(ty);
    if (is_time || is_year) found = int(m);
  }
  if (found < 0) return std::nullopt;
  size_t m = size_t(found);
  e.size = to_u64(t[m - 1].text);
  int mon = month_index(t[m].text);
  int day = int(*to_u64(t[m + 1].text));
  std::string_view ty = t[m + 2].text;
  if (ty.size() == 5) {
    int hh = int(*to_u64(ty.substr(0, 2))), mm = int(*to_u64(ty.substr(3)));
    if (hh > 23 || mm > 59) return std::nullopt;
    std::tm now_tm{};
    gmtime_r(&now, &now_tm);
    int year = now_tm.tm_year + 1900;
    std::time_t when = utc(year, mon, day, hh, mm);
    // ls prints HH:MM for dates in the last six months; a date "in the future" is last year's.
    if (when > now + 86400) when = utc(year - 1, mon, day, hh, mm);
    e.mtime = when;
    e.mtime_precision = 60;
  } else {
    e.mtime = utc(int(*to_u64(ty)), mon, day, 0, 0);
    e.mtime_precision = 86400;
  }
  size_t p = t[m + 2].end;
  if (p < line.size() && (line[p] == ' ' || line[p] == '\t')) ++p;  // one separator
  std::string_view name = line.substr(p);
  if (e.type == EntryType::Link) {
    size_t arrow = name.find(" -> ");
    if (arrow != std::string_view::npos) {
      e.link_target = std::string(name.substr(arrow + 4));
      name = name.substr(0, arrow);
    }
  }
  if (name.empty()) return std::nullopt;
  e.name = std::string(name);
  if (e.type != EntryType::File) e.size.reset();
  return e;
}

std::optional<RemoteEntry> parse_mlsd_line(std::string_view line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
  if (line.empty()) return std::nullopt;
  auto f = ftp::parse_facts(line);
  if (!f) return std::nullopt;
  RemoteEntry e;
  std::string type;
  for (char c : f->type) type.push_back(char(std::tolower(static_cast<unsigned char>(c))));
  if (type == "cdir" || type == "pdir") return std::nullopt;
  if (type == "file") e.type = EntryType::File;
  else if (type == "dir") e.type = EntryType::Dir;
  else if (type.find("symlink") != std::string::npos || type.find("slink") != std::string::npos)
    e.type = EntryType::Link;
  else e.type = EntryType::Other;
  e.name = f->name;
  e.size = f->size;
  e.mtime = f->modify;
  e.mtime_precision = 1;
  return e;
}

std::vector<RemoteEntry> parse_listing(std::string_view data, bool mlsd, std::time_t now,
                                       std::vector<std::string>* rejected) {
  std::vector<RemoteEntry> out;
  size_t pos = 0;
  while (pos < data.size()) {
    size_t nl = data.find('\n', pos);
    std::string_view line =
        data.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? data.size() : nl + 1;
    auto e = mlsd ? parse_mlsd_line(line) : parse_list_line(line, now);
    if (!e) continue;
    if (!safe_name(e->name)) {
      // "." and ".." are ordinary in LIST -a output; only report the others.
      if (rejected && e->name != "." && e->name != "..") rejected->push_back(e->name);
      continue;
    }
    out.push_back(std::move(*e));
  }
  return out;
}

}  // namespace tierce::ftpc
