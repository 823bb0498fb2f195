// tests/ftp/client/test_client_units.cc — units of tierce-ftp: URL parsing, ~/.netrc, LIST/MLSD
// line parsing (with hostile names), and the mirror planner (only-newer, delete, reverse).
#define BOOST_TEST_MODULE ftp_client_units
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include "ftp_adts/client/errors.h"
#include "ftp_adts/client/listing.h"
#include "ftp_adts/client/mirror.h"
#include "ftp_adts/client/netrc.h"
#include "ftp_adts/client/url.h"

using namespace tierce::ftpc;

namespace {
bool usage_error(const std::string& url) {
  try {
    parse_url(url);
  } catch (const ClientError& e) {
    return e.code() == Exit::Usage;
  }
  return false;
}
std::time_t utc(int y, int mo, int d, int h, int mi, int s = 0) {
  std::tm tm{};
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return timegm(&tm);
}
TreeEntry file(uint64_t size, std::time_t mtime, std::time_t precision = 1) {
  TreeEntry e;
  e.type = EntryType::File;
  e.size = size;
  e.mtime = mtime;
  e.precision = precision;
  return e;
}
TreeEntry dir() {
  TreeEntry e;
  e.type = EntryType::Dir;
  return e;
}
}  // namespace

BOOST_AUTO_TEST_CASE(url_full) {
  FtpUrl u = parse_url("ftp://alice:s%40cret@example.org:2121/pub/dir/file.bin");
  BOOST_TEST(*u.user == "alice");
  BOOST_TEST(*u.password == "s@cret");
  BOOST_TEST(u.host == "example.org");
  BOOST_TEST(u.port == 2121);
  BOOST_TEST(u.path == "pub/dir/file.bin");
  BOOST_TEST(u.basename() == "file.bin");
  BOOST_TEST(u.endpoint() == "example.org:2121");
}

BOOST_AUTO_TEST_CASE(url_defaults_and_forms) {
  FtpUrl u = parse_url("ftp://host");
  BOOST_TEST(!u.user.has_value());
  BOOST_TEST(u.port == 21);
  BOOST_TEST(u.path == "");
  u = parse_url("FTP://host/dir/");
  BOOST_TEST(u.path == "dir");
  BOOST_TEST(u.dir_hint);
  BOOST_TEST(u.basename() == "dir");
  u = parse_url("ftp://[::1]:21000/%2Fetc/x");
  BOOST_TEST(u.host == "::1");
  BOOST_TEST(u.port == 21000);
  BOOST_TEST(u.path == "/etc/x");
  BOOST_TEST(u.endpoint() == "[::1]:21000");
  u = parse_url("ftp://bob@h/a%20b");
  BOOST_TEST(*u.user == "bob");
  BOOST_TEST(!u.password.has_value());
  BOOST_TEST(u.path == "a b");
  // '@' in the password without escaping: the last '@' ends the user info.
  u = parse_url("ftp://u:p@ss@h/");
  BOOST_TEST(*u.password == "p@ss");
  BOOST_TEST(u.host == "h");
}

BOOST_AUTO_TEST_CASE(url_rejects) {
  BOOST_TEST(usage_error("http://h/x"));
  BOOST_TEST(usage_error("ftps://h/x"));
  BOOST_TEST(usage_error("ftp:///x"));
  BOOST_TEST(usage_error("ftp://h:0/"));
  BOOST_TEST(usage_error("ftp://h:65536/"));
  BOOST_TEST(usage_error("ftp://h:12a/"));
  BOOST_TEST(usage_error("ftp://[::1/"));
  BOOST_TEST(usage_error("ftp://h/a%0D%0ADELE%20x"));  // command injection
  BOOST_TEST(usage_error("ftp://h/a%00"));
  BOOST_TEST(usage_error("ftp://h/a%2"));
  BOOST_TEST(usage_error("ftp://h/a%zz"));
  BOOST_TEST(usage_error("ftp://@h/"));
}

BOOST_AUTO_TEST_CASE(join) {
  BOOST_TEST(join_remote("", "a") == "a");
  BOOST_TEST(join_remote("d", "a") == "d/a");
  BOOST_TEST(join_remote("/", "a") == "/a");
}

BOOST_AUTO_TEST_CASE(netrc_lookup) {
  auto e = parse_netrc(
      "machine ftp.example.org login alice password secret1\n"
      "# a comment\n"
      "machine ftp.example.org\n  login bob\n  password \"two words\"\n"
      "macdef init\ncd /pub\nbin\n\n"
      "machine other login carol password c\n"
      "default login anonymous password guest@\n");
  BOOST_TEST(netrc_password(e, "ftp.example.org", "alice").value() == "secret1");
  BOOST_TEST(netrc_password(e, "ftp.example.org", "bob").value() == "two words");
  BOOST_TEST(netrc_password(e, "other", "carol").value() == "c");
  BOOST_TEST(!netrc_password(e, "other", "dave").has_value());
  BOOST_TEST(netrc_password(e, "elsewhere", "anonymous").value() == "guest@");
  BOOST_TEST(parse_netrc("").empty());
  BOOST_TEST(parse_netrc("machine").empty());  // truncated: no crash, nothing
}

BOOST_AUTO_TEST_CASE(list_unix_lines) {
  std::time_t now = utc(2026, 11, 21, 12, 0);
  auto e = parse_list_line("-rw-r--r--    1 1000     1000         1234 Nov 21 09:30 file name.txt",
                           now);
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->name == "file name.txt");
  BOOST_TEST(int(e->type) == int(EntryType::File));
  BOOST_TEST(e->size.value() == 1234u);
  BOOST_TEST(*e->mtime == utc(2026, 11, 21, 9, 30));
  BOOST_TEST(e->mtime_precision == 60);
  // A date after "now" is last year's.
  e = parse_list_line("-rw-r--r--    1 0 0 5 Dec 24 18:00 x", now);
  BOOST_TEST(*e->mtime == utc(2025, 12, 24, 18, 0));
  e = parse_list_line("drwxr-xr-x    2 ftp      ftp          4096 Jan  3  2024 sub", now);
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(int(e->type) == int(EntryType::Dir));
  BOOST_TEST(*e->mtime == utc(2024, 1, 3, 0, 0));
  BOOST_TEST(e->mtime_precision == 86400);
  e = parse_list_line("lrwxrwxrwx    1 0 0 7 Nov 21 09:30 link -> target", now);
  BOOST_TEST(int(e->type) == int(EntryType::Link));
  BOOST_TEST(e->name == "link");
  BOOST_TEST(e->link_target == "target");
  // No group column; an owner that looks like a month.
  e = parse_list_line("-rw-r--r-- 1 may 77 Mar  5 10:01 a", now);
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->size.value() == 77u);
  BOOST_TEST(e->name == "a");
  BOOST_TEST(!parse_list_line("total 12", now).has_value());
  BOOST_TEST(!parse_list_line("", now).has_value());
  BOOST_TEST(!parse_list_line("garbage line", now).has_value());
  BOOST_TEST(!parse_list_line("-rw-r--r-- 1 0 0 12 Foo 21 09:30 x", now).has_value());
  BOOST_TEST(!parse_list_line("-rw-r--r-- 1 0 0 12 Nov 21 09:30 ", now).has_value());
}

BOOST_AUTO_TEST_CASE(list_dos_lines) {
  auto e = parse_list_line("01-03-24  10:00PM       <DIR>          Some Dir", 0);
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(int(e->type) == int(EntryType::Dir));
  BOOST_TEST(e->name == "Some Dir");
  BOOST_TEST(*e->mtime == utc(2024, 1, 3, 22, 0));
  e = parse_list_line("11-21-2026  09:30AM              4096 file.bin", 0);
  BOOST_REQUIRE(e.has_value());
  BOOST_TEST(e->size.value() == 4096u);
}

BOOST_AUTO_TEST_CASE(listing_rejects_unsafe_names) {
  std::string data =
      "-rw-r--r-- 1 0 0 1 Nov 21 09:30 ok.txt\r\n"
      "drwxr-xr-x 2 0 0 1 Nov 21 09:30 ..\r\n"
      "drwxr-xr-x 2 0 0 1 Nov 21 09:30 .\r\n"
      "-rw-r--r-- 1 0 0 1 Nov 21 09:30 ../../etc/passwd\r\n"
      "-rw-r--r-- 1 0 0 1 Nov 21 09:30 a/b\r\n";
  std::vector<std::string> rejected;
  auto v = parse_listing(data, false, utc(2026, 11, 21, 12, 0), &rejected);
  BOOST_REQUIRE(v.size() == 1u);
  BOOST_TEST(v[0].name == "ok.txt");
  BOOST_TEST(rejected.size() == 2u);
  BOOST_TEST(!safe_name(""));
  BOOST_TEST(!safe_name(".."));
  BOOST_TEST(safe_name("..."));
  BOOST_TEST(!safe_name(std::string("a\0b", 3)));
}

BOOST_AUTO_TEST_CASE(listing_mlsd) {
  std::string data =
      "type=cdir;modify=20261121093000; .\r\n"
      "type=file;size=123;modify=20261121093000;perm=r; a file\r\n"
      "type=dir;modify=20261121093000; sub\r\n"
      "type=file;size=1; ..\r\n"
      "type=OS.unix=symlink;modify=20261121093000; ln\r\n";
  std::vector<std::string> rejected;
  auto v = parse_listing(data, true, 0, &rejected);
  BOOST_REQUIRE(v.size() == 3u);
  BOOST_TEST(v[0].name == "a file");
  BOOST_TEST(v[0].size.value() == 123u);
  BOOST_TEST(*v[0].mtime == utc(2026, 11, 21, 9, 30));
  BOOST_TEST(v[0].mtime_precision == 1);
  BOOST_TEST(int(v[1].type) == int(EntryType::Dir));
  BOOST_TEST(int(v[2].type) == int(EntryType::Link));
}

BOOST_AUTO_TEST_CASE(plan_fresh_mirror) {
  Tree src{{"a", dir()}, {"a/x", file(10, 100)}, {"big", file(1000, 100)}, {"b", file(5, 100)}};
  MirrorPlan p = plan_mirror(src, Tree{}, MirrorOptions{});
  BOOST_TEST(p.mkdirs == std::vector<std::string>{"a"});
  BOOST_REQUIRE(p.copies.size() == 3u);
  BOOST_TEST(p.copies[0].path == "big");  // biggest first
  BOOST_TEST(p.copies[2].path == "b");
  BOOST_TEST(p.delete_files.empty());
}

BOOST_AUTO_TEST_CASE(plan_only_newer) {
  Tree src{{"same", file(10, 1000)},
           {"size", file(11, 1000)},
           {"newer", file(10, 2000)},
           {"older", file(10, 500)},
           {"coarse", file(10, 1030)}};
  Tree dst{{"same", file(10, 1000)},
           {"size", file(10, 1000)},
           {"newer", file(10, 1000)},
           {"older", file(10, 1000)},
           {"coarse", file(10, 1020, 60)}};  // target time known to the minute only
  MirrorOptions o;
  MirrorPlan all = plan_mirror(src, dst, o);
  BOOST_TEST(all.copies.size() == 5u);  // without --only-newer everything is copied
  o.only_newer = true;
  MirrorPlan p = plan_mirror(src, dst, o);
  std::vector<std::string> got;
  for (auto& c : p.copies) got.push_back(c.path);
  std::sort(got.begin(), got.end());
  BOOST_TEST(got == (std::vector<std::string>{"newer", "size"}));
  BOOST_TEST(p.skipped == 3u);
}

BOOST_AUTO_TEST_CASE(plan_delete) {
  Tree src{{"keep", file(1, 1)}, {"d", dir()}};
  Tree dst{{"keep", file(1, 1)}, {"d", dir()},          {"gone", file(1, 1)},
           {"x", dir()},         {"x/y", dir()},        {"x/y/z", file(1, 1)},
           {"d/old", file(1, 1)}};
  MirrorOptions o;
  o.only_newer = true;
  MirrorPlan keep = plan_mirror(src, dst, o);
  BOOST_TEST(keep.delete_files.empty());
  BOOST_TEST(keep.delete_dirs.empty());
  o.del = true;
  MirrorPlan p = plan_mirror(src, dst, o);
  std::vector<std::string> files = p.delete_files;
  std::sort(files.begin(), files.end());
  BOOST_TEST(files == (std::vector<std::string>{"d/old", "gone", "x/y/z"}));
  BOOST_TEST(p.delete_dirs == (std::vector<std::string>{"x/y", "x"}));  // deepest first
  BOOST_TEST(p.copies.empty());
}

BOOST_AUTO_TEST_CASE(plan_conflicts) {
  Tree src{{"f", file(1, 1)}, {"d", dir()}, {"d/in", file(1, 1)}};
  Tree dst{{"f", dir()}, {"d", file(3, 1)}};
  MirrorPlan p = plan_mirror(src, dst, MirrorOptions{});
  BOOST_TEST(p.conflicts.size() == 2u);
  BOOST_TEST(p.copies.empty());  // d/in is under a conflicting directory
  MirrorOptions o;
  o.del = true;
  p = plan_mirror(src, dst, o);
  // With --delete the file "d" makes room for the directory; "f" (a dir in the target) stays
  // a conflict (we never delete a tree to put a file there).
  BOOST_TEST(p.mkdirs == std::vector<std::string>{"d"});
  BOOST_TEST(p.delete_files == std::vector<std::string>{"d"});
  BOOST_TEST(p.copies.size() == 1u);
  BOOST_TEST(p.conflicts.size() == 1u);
}

BOOST_AUTO_TEST_CASE(plan_reverse_is_symmetric) {
  // The planner does not care about the direction: -R passes (local, remote) as (source, target).
  Tree local{{"a", file(5, 2000)}, {"sub", dir()}, {"sub/b", file(1, 2000)}};
  Tree remote{{"a", file(5, 2100, 60)}, {"stale", file(1, 1)}};
  MirrorOptions o;
  o.reverse = o.only_newer = o.del = true;
  MirrorPlan p = plan_mirror(local, remote, o);
  BOOST_TEST(p.mkdirs == std::vector<std::string>{"sub"});
  BOOST_REQUIRE(p.copies.size() == 1u);
  BOOST_TEST(p.copies[0].path == "sub/b");
  BOOST_TEST(p.delete_files == std::vector<std::string>{"stale"});
}
