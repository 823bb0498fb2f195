// tests/ftp/proto/test_protocol.cc — the FTP text codecs (ftp_adts/ftp/protocol.h): command lines
// with telnet noise, replies both ways, PORT/PASV/EPRT/EPSV, TPRT, MLST facts, time-vals.
#define BOOST_TEST_MODULE ftp_proto_protocol
#define BOOST_TEST_MAIN  // tests/support/pch.h says why
#include <boost/test/unit_test.hpp>

#include <string>

#include "ftp_adts/ftp/protocol.h"

using namespace tierce::ftp;

namespace {

Command cmd(std::string_view line, ParseError expect = ParseError::None) {
  Command c;
  BOOST_TEST((parse_command(line, &c) == expect), "line \"" << line << "\"");
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(commands)

BOOST_AUTO_TEST_CASE(verb_and_argument) {
  auto c = cmd("retr some file.txt");
  BOOST_TEST(c.verb == "RETR");
  BOOST_TEST(c.arg == "some file.txt");
  c = cmd("PWD");
  BOOST_TEST(c.verb == "PWD");
  BOOST_TEST(c.arg.empty());
  c = cmd("XMKD  two spaces ");  // the argument is kept as sent
  BOOST_TEST(c.verb == "XMKD");
  BOOST_TEST(c.arg == " two spaces ");
  c = cmd("CWD ");
  BOOST_TEST(c.arg.empty());
  c = cmd("NOOP\r");  // a CR left by a LF-splitting reader
  BOOST_TEST(c.verb == "NOOP");
  BOOST_TEST(c.arg.empty());
}

BOOST_AUTO_TEST_CASE(errors) {
  cmd("", ParseError::Empty);
  cmd("   ", ParseError::Empty);
  cmd(std::string(kMaxCommandLine + 1, 'A'), ParseError::TooLong);
  cmd(std::string(kMaxCommandLine, 'A'), ParseError::BadVerb);  // within limit, verb too long
  cmd("RETR a\0b", ParseError::None);                           // string_view stops at the NUL
  cmd(std::string_view("RETR a\0b", 8), ParseError::NulByte);
  cmd("1ABC", ParseError::BadVerb);
  cmd("ABCDEFGHI x", ParseError::BadVerb);
  cmd("RE-TR", ParseError::BadVerb);
  cmd(" RETR x", ParseError::BadVerb);
  cmd("RETR\tx", ParseError::BadVerb);
  cmd("R\xc3\xa9TR", ParseError::BadVerb);
  BOOST_TEST(cmd("XCUP1").verb == "XCUP1");
  BOOST_TEST(!to_string(ParseError::TooLong).empty());
}

BOOST_AUTO_TEST_CASE(telnet_sequences_are_stripped) {
  // What clients send before ABOR: IAC IP IAC DM (the DM often as TCP urgent data).
  BOOST_TEST(cmd("\xff\xf4\xff\xf2"
                 "ABOR")
                 .verb == "ABOR");
  // IAC IAC is a data byte 0xFF.
  auto c =
      cmd("STOR a\xff\xff"
          "b");
  BOOST_TEST(c.arg ==
             "a\xff"
             "b");
  // Option negotiation (IAC DO x) and subnegotiation (IAC SB ... IAC SE).
  BOOST_TEST(cmd("\xff\xfd\x01NOOP").verb == "NOOP");
  BOOST_TEST(cmd("\xff\xfa\x18\x01xyz\xff\xf0QUIT").verb == "QUIT");
  // A lone IAC at the end, or an unterminated SB, does not crash and is dropped.
  BOOST_TEST(cmd("NOOP\xff").verb == "NOOP");
  cmd("\xff\xfa\x18NOOP", ParseError::Empty);
  cmd("\xff\xf4\xff\xf2", ParseError::Empty);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(replies)

BOOST_AUTO_TEST_CASE(formatting) {
  BOOST_TEST(format_reply(226, "Done") == "226 Done\r\n");
  BOOST_TEST(format_multiline(211, {"Features:", " UTF8", "End"}) ==
             "211-Features:\r\n UTF8\r\n211 End\r\n");
  BOOST_TEST(format_multiline(200, {"only"}) == "200 only\r\n");
  // Text with a newline becomes a multi-line reply; CR/LF cannot inject lines.
  BOOST_TEST(format_reply(230, "Hello\nWorld") == "230-Hello\r\n230 World\r\n");
  BOOST_TEST(format_reply(550, "bad\rname") == "550 bad name\r\n");
  // A middle line starting with a digit is padded so it cannot read as the end line.
  BOOST_TEST(format_multiline(211, {"a", "226 x", "b"}) == "211-a\r\n 226 x\r\n211 b\r\n");
}

BOOST_AUTO_TEST_CASE(parse_single_and_multi) {
  ReplyParser p;
  p.feed("220 Welcome\r\n230-Hello\r\n there\r\n230-also\r\n230 Logged in\r\n");
  auto r = p.take();
  BOOST_REQUIRE(r);
  BOOST_TEST(r->code == 220);
  BOOST_TEST(r->text() == "Welcome");
  r = p.take();
  BOOST_REQUIRE(r);
  BOOST_TEST(r->code == 230);
  BOOST_TEST(r->lines.size() == 4u);
  BOOST_TEST(r->text() == "Hello\n there\nalso\nLogged in");
  BOOST_TEST(r->ok());
  BOOST_TEST(!p.take());
  BOOST_TEST(!p.error());
}

BOOST_AUTO_TEST_CASE(parse_byte_by_byte) {
  std::string wire = format_multiline(211, {"Features:", " TPRT TCP;PTCP", " 123 not end", "End"}) +
                     "150 Opening\n" + "226\r\n";
  ReplyParser p;
  std::vector<Reply> got;
  for (char c : wire) {
    p.feed(std::string_view(&c, 1));
    while (auto r = p.take()) got.push_back(*r);
  }
  BOOST_TEST(!p.error());
  BOOST_REQUIRE(got.size() == 3u);
  BOOST_TEST(got[0].code == 211);
  BOOST_TEST(got[0].lines.size() == 4u);
  BOOST_TEST(got[0].lines[2] == " 123 not end");
  BOOST_TEST(got[1].positive_preliminary());
  BOOST_TEST(got[2].code == 226);
  BOOST_TEST(got[2].lines.size() == 1u);
}

BOOST_AUTO_TEST_CASE(multi_line_ends_only_with_same_code) {
  ReplyParser p;
  p.feed("211-start\r\n226 not the end\r\n211 end\r\n");
  auto r = p.take();
  BOOST_REQUIRE(r);
  BOOST_TEST(r->lines.size() == 3u);
  BOOST_TEST(r->lines[1] == "226 not the end");
}

BOOST_AUTO_TEST_CASE(garbage) {
  for (std::string bad :
       {"hello\r\n", "22 x\r\n", "2200 x\r\n", "099 x\r\n", "700 x\r\n", "abc\r\n"}) {
    ReplyParser p;
    p.feed(bad);
    BOOST_TEST(!p.take());
    BOOST_TEST(p.error(), bad);
    BOOST_TEST(!p.error_text().empty());
    p.feed("200 ok\r\n");  // stays in error
    BOOST_TEST(!p.take());
  }
  ReplyParser p;
  p.feed(std::string(70000, '2'));  // no newline ever
  BOOST_TEST(!p.take());
  BOOST_TEST(p.error());
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(addresses)

BOOST_AUTO_TEST_CASE(port_and_pasv) {
  auto hp = parse_port_arg("192,168,1,2,7,138");
  BOOST_REQUIRE(hp);
  BOOST_TEST(hp->host == "192.168.1.2");
  BOOST_TEST(hp->port == 1930);
  BOOST_TEST(format_port_arg(*hp) == "192,168,1,2,7,138");
  BOOST_TEST(!parse_port_arg("192,168,1,2,0,0"));  // port 0
  BOOST_TEST(!parse_port_arg("0,0,0,0,7,138"));    // nowhere
  BOOST_TEST(!parse_port_arg("256,168,1,2,7,138"));
  BOOST_TEST(!parse_port_arg("192,168,1,2,7"));
  BOOST_TEST(!parse_port_arg("192,168,1,2,7,138,1"));
  BOOST_TEST(!parse_port_arg("192,168,1,2,7,-1"));
  BOOST_TEST(!parse_port_arg("192,168,1,2,7,0001"));
  BOOST_TEST(!parse_port_arg(""));
  BOOST_TEST(format_port_arg({"::1", 21}).empty());

  auto p = parse_pasv_reply("Entering Passive Mode (127,0,0,1,117,48).");
  BOOST_REQUIRE(p);
  BOOST_TEST(p->host == "127.0.0.1");
  BOOST_TEST(p->port == 30000);
  p = parse_pasv_reply("Entering Passive Mode 10,0,0,5,4,1");  // no parentheses (RFC 1123)
  BOOST_REQUIRE(p);
  BOOST_TEST(p->host == "10.0.0.5");
  BOOST_TEST(p->port == 1025);
  BOOST_TEST(!parse_pasv_reply("Entering Passive Mode (127,0,0,1,0,0)"));
  BOOST_TEST(!parse_pasv_reply("no numbers here"));
}

BOOST_AUTO_TEST_CASE(eprt_and_epsv) {
  auto hp = parse_eprt_arg("|1|132.235.1.2|6275|");
  BOOST_REQUIRE(hp);
  BOOST_TEST(hp->host == "132.235.1.2");
  BOOST_TEST(hp->port == 6275);
  BOOST_TEST(format_eprt_arg(*hp) == "|1|132.235.1.2|6275|");
  hp = parse_eprt_arg("|2|1080::8:800:200C:417A|5282|");
  BOOST_REQUIRE(hp);
  BOOST_TEST(hp->host == "1080::8:800:200c:417a");  // canonical form
  BOOST_TEST(format_eprt_arg(*hp) == "|2|1080::8:800:200c:417a|5282|");
  BOOST_TEST(parse_eprt_arg("!1!10.0.0.1!21!").has_value());  // any delimiter 33..126
  BOOST_TEST(!parse_eprt_arg("|1|132.235.1.2|0|"));           // port 0
  BOOST_TEST(!parse_eprt_arg("|1|132.235.1.2|65536|"));
  BOOST_TEST(!parse_eprt_arg("|1|::1|21|"));  // family mismatch
  BOOST_TEST(!parse_eprt_arg("|2|10.0.0.1|21|"));
  BOOST_TEST(!parse_eprt_arg("|3|10.0.0.1|21|"));
  BOOST_TEST(!parse_eprt_arg("|1|0.0.0.0|21|"));
  BOOST_TEST(!parse_eprt_arg("|2|::|21|"));
  BOOST_TEST(!parse_eprt_arg("|1|host.example|21|"));
  BOOST_TEST(!parse_eprt_arg("|1|10.0.0.1|21"));
  BOOST_TEST(!parse_eprt_arg("|1|10.0.0.1|21|x|"));
  BOOST_TEST(!parse_eprt_arg("1|10.0.0.1|21|1"));
  BOOST_TEST(!parse_eprt_arg(""));

  BOOST_TEST(parse_epsv_reply("Entering Extended Passive Mode (|||6446|)").value_or(0) == 6446);
  BOOST_TEST(parse_epsv_reply("ok (!!!21!)").value_or(0) == 21);
  BOOST_TEST(!parse_epsv_reply("Entering Extended Passive Mode (|||0|)"));
  BOOST_TEST(!parse_epsv_reply("Entering Extended Passive Mode (|||70000|)"));
  BOOST_TEST(!parse_epsv_reply("Entering Extended Passive Mode (||6446|)"));
  BOOST_TEST(!parse_epsv_reply("Entering Extended Passive Mode |||6446|"));
  BOOST_TEST(!parse_epsv_reply("(|||6446|"));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_CASE(tprt) {
  auto t = parse_tprt_arg("TCP");
  BOOST_REQUIRE(t);
  BOOST_TEST((t->kind == TprtRequest::Kind::Tcp));
  BOOST_TEST(t->streams == 1u);
  t = parse_tprt_arg("ptcp 8");
  BOOST_REQUIRE(t);
  BOOST_TEST((t->kind == TprtRequest::Kind::ParallelTcp));
  BOOST_TEST(t->streams == 8u);
  t = parse_tprt_arg("PTCP 0");  // parsed; the server answers "501 ... must be 1..16"
  BOOST_REQUIRE(t);
  BOOST_TEST(t->streams == 0u);
  BOOST_TEST((parse_tprt_arg("VERBS")->kind == TprtRequest::Kind::Verbs));
  BOOST_TEST((parse_tprt_arg("STREAM")->kind == TprtRequest::Kind::Stream));
  BOOST_TEST(!parse_tprt_arg(""));
  BOOST_TEST(!parse_tprt_arg("PTCP"));
  BOOST_TEST(!parse_tprt_arg("PTCP x"));
  BOOST_TEST(!parse_tprt_arg("PTCP -1"));
  BOOST_TEST(!parse_tprt_arg("PTCP 99999999999"));
  BOOST_TEST(!parse_tprt_arg("TCP 2"));
  BOOST_TEST(!parse_tprt_arg("UDP"));

  BOOST_TEST(parse_tprt_cookie("TPRT PTCP 8 cookie=5f0c2a99d3e1b7a4").value_or(0) ==
             0x5f0c2a99d3e1b7a4ull);
  BOOST_TEST(parse_tprt_cookie("TPRT TCP cookie=FFFFFFFFFFFFFFFF").value_or(0) == ~0ull);
  BOOST_TEST(!parse_tprt_cookie("TPRT TCP cookie=5f0c2a99d3e1b7a4f"));  // 17 digits
  BOOST_TEST(!parse_tprt_cookie("TPRT TCP cookie="));
  BOOST_TEST(!parse_tprt_cookie("TPRT TCP"));
}

BOOST_AUTO_TEST_SUITE(mlst)

BOOST_AUTO_TEST_CASE(time_val) {
  BOOST_TEST(format_time_val(0) == "19700101000000");
  BOOST_TEST(format_time_val(1795253400) == "20261121093000");
  BOOST_TEST(parse_time_val("20261121093000").value_or(0) == 1795253400);
  BOOST_TEST(parse_time_val("20261121093000.123").value_or(0) == 1795253400);
  BOOST_TEST(parse_time_val("20000229000000").has_value());
  BOOST_TEST(!parse_time_val("19000229000000"));  // not a leap year
  BOOST_TEST(!parse_time_val("20261321093000"));
  BOOST_TEST(!parse_time_val("20261100093000"));
  BOOST_TEST(!parse_time_val("20261121243000"));
  BOOST_TEST(!parse_time_val("2026112109300"));
  BOOST_TEST(!parse_time_val("20261121093000."));
  BOOST_TEST(!parse_time_val("20261121093000x"));
  BOOST_TEST(!parse_time_val("2026112109300a"));
  BOOST_TEST(!parse_time_val("+0261121093000"));
  for (std::time_t t : {std::time_t(-86401), std::time_t(951782400), std::time_t(4102444799)})
    BOOST_TEST(parse_time_val(format_time_val(t)).value_or(1) == t);
  BOOST_TEST(format_time_val(std::time_t(1) << 50) == "99991231235959");  // clamped
  BOOST_TEST(format_time_val(-(std::time_t(1) << 50)) == "00000101000000");
  BOOST_TEST(format_time_val(parse_time_val("00000605114321").value_or(0)) == "00000605114321");
}

BOOST_AUTO_TEST_CASE(facts_round_trip) {
  Facts f;
  f.name = "my file; with=semicolon";
  f.type = "file";
  f.size = 123;
  f.modify = 1795253400;
  f.perm = "adfrw";
  f.unix_mode = 0644;
  std::string line = format_facts(f);
  BOOST_TEST(line ==
             "type=file;size=123;modify=20261121093000;perm=adfrw;UNIX.mode=0644; my file; "
             "with=semicolon");
  auto g = parse_facts(line);
  BOOST_REQUIRE(g);
  BOOST_TEST(g->name == f.name);
  BOOST_TEST(g->type == "file");
  BOOST_TEST(g->size.value_or(0) == 123u);
  BOOST_TEST(g->modify.value_or(0) == f.modify.value());
  BOOST_TEST(g->perm == "adfrw");
  BOOST_TEST(g->unix_mode.value_or(0) == 0644u);
}

BOOST_AUTO_TEST_CASE(facts_parsing) {
  // Case-insensitive names, unknown facts ignored, MLST indentation.
  auto f = parse_facts(" Type=DIR;Modify=20200101000000;UNIQUE=801g4;perm=ELCMP; /pub");
  BOOST_REQUIRE(f);
  BOOST_TEST(f->type == "dir");
  BOOST_TEST(f->perm == "elcmp");
  BOOST_TEST(f->name == "/pub");
  f = parse_facts("type=OS.unix=symlink;size=7; link");
  BOOST_REQUIRE(f);
  BOOST_TEST(f->type == "OS.unix=symlink");
  f = parse_facts(" facts-less name");  // no facts: the name starts after the space
  BOOST_REQUIRE(f);
  BOOST_TEST(f->name == "facts-less name");
  BOOST_TEST(f->type.empty());
  f = parse_facts("size=1;  two leading spaces\r");
  BOOST_REQUIRE(f);
  BOOST_TEST(f->name == " two leading spaces");
  f = parse_facts("size=18446744073709551615; big");
  BOOST_REQUIRE(f);
  BOOST_TEST(f->size.value_or(0) == 18446744073709551615ull);
  for (std::string bad : {"", "name", "type=file", "type=file;", "type=file; ", "type=file name",
                          "=x; n", "size=x; n", "size=18446744073709551616; n", "size=; n",
                          "modify=2026; n", "UNIX.mode=9; n", "UNIX.mode=17777; n", "type; n"})
    BOOST_TEST(!parse_facts(bad), bad);
}

BOOST_AUTO_TEST_SUITE_END()
