// tests/fuzz/fuzz_binlog_rows.cc — fuzz target for tierce-binlogd's row decoder
// (agents/binlogd/row_decoder.h): the bytes a replication stream hands over — a TABLE_MAP event's
// parts and a rows event's bitmaps and images — go through decode_table_map and decode_rows. Besides
// "no crash, no hang, no read out of bounds" (each part is copied into a buffer of its exact size,
// so the sanitizer build sees a read past any part), a table map that decodes is consistent (a
// name and a class per column, its key inside the columns), and rows that decode are plausible:
// an image per side of the change, a value only where the column is present and of a readable
// type, integers in decimal, no more value bytes than the event had; a failure carries its msgid.
//
// The input: byte 0 the mode (bits 0-1 insert/update/delete, bit 2 column names from the input
// instead of c0..cN, bit 3 the column bitmaps from the input instead of every column), then the
// column types (a count byte, then the types), the metadata, SIGNEDNESS, [names,] SIMPLE_PRIMARY_KEY
// and PRIMARY_KEY_WITH_PREFIX each as a length byte and its bytes, [the two column bitmaps,] and the
// rows: the rest of the input. A part cut short by the input's end is what it is.
//
// Built twice (tests/fuzz/CMakeLists.txt): with -DTIERCE_LIBFUZZER under libFuzzer, and without
// it with the deterministic replay driver at the bottom of this file:
//   fuzz_binlog_rows_replay [--iterations N] [--write-seeds DIR] [FILE...]
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "agents/binlogd/row_decoder.h"

using namespace tierce::binlogd;
using tierce::sqldeps::RowChange;
using tierce::sqldeps::RowImage;

namespace {

using Bytes = std::vector<uint8_t>;

std::string_view g_input;

[[noreturn]] void violated(const char* what, int line) {
  std::fprintf(stderr, "fuzz_binlog_rows: invariant violated: %s (line %d) on input \"", what,
               line);
  for (unsigned char c : g_input) std::fprintf(stderr, "\\x%02x", c);
  std::fprintf(stderr, "\"\n");
  std::abort();
}

}  // namespace

#define FUZZ_CHECK(cond)                    \
  do {                                      \
    if (!(cond)) violated(#cond, __LINE__); \
  } while (0)

namespace {

uint64_t g_maps = 0, g_events = 0, g_rows = 0, g_values = 0;

struct Cursor {
  const uint8_t* p;
  size_t n, at = 0;
  uint8_t byte() { return at < n ? p[at++] : 0; }
  Bytes take(size_t k) {
    if (k > n - at) k = n - at;
    Bytes v(p + at, p + at + k);
    at += k;
    return v;
  }
};

bool bit(const Bytes& bits, size_t i) { return i / 8 < bits.size() && (bits[i / 8] >> (i % 8)) & 1; }

bool integer_type(uint8_t t) { return t == 1 || t == 2 || t == 3 || t == 8 || t == 9; }

bool decimal_text(const std::string& s) {
  size_t i = !s.empty() && s[0] == '-' ? 1 : 0;
  if (i >= s.size() || s.size() > 20) return false;
  if (s[i] == '0' && s.size() > i + 1) return false;
  if (i == 1 && s == "-0") return false;
  for (; i < s.size(); ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

// One image of a decoded row; returns the bytes of its values.
size_t check_image(const TableMap& t, const Bytes& bits, const RowImage& img) {
  FUZZ_CHECK(img.size() == t.types.size());
  size_t bytes = 0;
  for (size_t c = 0; c < img.size(); ++c) {
    if (!img[c]) continue;
    ++g_values;
    FUZZ_CHECK(bit(bits, c));
    FUZZ_CHECK(value_readable(t.types[c], t.meta[c]));
    if (integer_type(t.types[c])) FUZZ_CHECK(decimal_text(*img[c]));
    else bytes += img[c]->size();
  }
  return bytes;
}

void check_rows(const TableMap& t, RowChange kind, const Bytes& present,
                const Bytes& present_after, const Bytes& rows) {
  auto r = decode_rows(t, kind, present, present_after, rows);
  if (!r.ok()) {
    FUZZ_CHECK(r.status().msgid() == "BINLOGD0102");
    FUZZ_CHECK(!r.message().empty());
    return;
  }
  ++g_events;
  FUZZ_CHECK(rows.empty() == r->empty());
  size_t text = 0;
  for (const RowPair& p : *r) {
    ++g_rows;
    if (kind == RowChange::Insert) FUZZ_CHECK(p.before.empty());
    else text += check_image(t, present, p.before);
    if (kind == RowChange::Delete) FUZZ_CHECK(p.after.empty());
    else text += check_image(t, kind == RowChange::Update ? present_after : present, p.after);
  }
  FUZZ_CHECK(text <= rows.size());  // every string's bytes came from the event
}

}  // namespace

// For the replay driver's report: how deep the inputs got.
extern "C" void fuzz_binlog_rows_stats(uint64_t* maps, uint64_t* events, uint64_t* rows,
                                       uint64_t* values) {
  *maps = g_maps;
  *events = g_events;
  *rows = g_rows;
  *values = g_values;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  g_input = std::string_view(reinterpret_cast<const char*>(data), size);
  Cursor in{data, size};
  const uint8_t mode = in.byte();
  const RowChange kind = (mode & 3) == 1 ? RowChange::Update
                         : (mode & 3) == 2 ? RowChange::Delete
                                           : RowChange::Insert;
  // Each part in a buffer of its own, of its exact size.
  Bytes types = in.take(in.byte());
  Bytes meta = in.take(in.byte());
  Bytes sign = in.take(in.byte());
  Bytes names;
  if (mode & 4) {
    names = in.take(in.byte());
  } else {
    for (size_t c = 0; c < types.size(); ++c) {
      std::string n = "c" + std::to_string(c);
      names.push_back(uint8_t(n.size()));
      names.insert(names.end(), n.begin(), n.end());
    }
  }
  Bytes pk = in.take(in.byte());
  Bytes ppk = in.take(in.byte());
  const size_t n = types.size();
  Bytes present((n + 7) / 8, 0xff), present_after = present;
  if (mode & 8) {
    present = in.take((n + 7) / 8);
    present_after = in.take((n + 7) / 8);
  }
  Bytes rows = in.take(size);

  TableMapParts parts{77, "db", "t", types, meta, sign, names, pk, ppk};
  auto t = decode_table_map(parts);
  if (!t.ok()) {
    FUZZ_CHECK(t.status().msgid() == "BINLOGD0101");
    return 0;
  }
  ++g_maps;
  FUZZ_CHECK(t->types.size() == n && t->meta.size() == n && t->is_unsigned.size() == n);
  FUZZ_CHECK(t->table.columns.size() == n && t->table.types.size() == n);
  for (size_t c : t->table.primary_key) FUZZ_CHECK(c < n);
  for (size_t c = 0; c < n; ++c)
    FUZZ_CHECK(t->table.types[c] == column_class(t->types[c], t->meta[c]));
  check_rows(*t, kind, present, present_after, rows);
  return 0;
}

#ifndef TIERCE_LIBFUZZER
// ---- deterministic replay driver (any compiler; in ctest) ---------------------------------------
#include <initializer_list>
#include <optional>
#include <random>

#include "replay_args.h"

namespace {

// Binlog column types (mariadb_com.h).
enum : uint8_t {
  tTiny = 1, tShort = 2, tLong = 3, tFloat = 4, tDouble = 5, tLongLong = 8, tInt24 = 9,
  tYear = 13, tVarchar = 15, tBit = 16, tTimestamp2 = 17, tDateTime2 = 18, tTime2 = 19,
  tJson = 245, tNewDecimal = 246, tEnum = 247, tBlob = 252, tString = 254, tGeometry = 255,
};

Bytes le(uint64_t v, size_t n) {
  Bytes b;
  for (size_t i = 0; i < n; ++i) b.push_back(uint8_t(v >> (8 * i)));
  return b;
}

Bytes str(const std::string& s, size_t len_bytes) {
  Bytes b = le(s.size(), len_bytes);
  b.insert(b.end(), s.begin(), s.end());
  return b;
}

Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// A row image over `values` (one per present column, nullopt = NULL).
Bytes image(const std::vector<std::optional<Bytes>>& values) {
  Bytes nulls((values.size() + 7) / 8, 0), data;
  for (size_t i = 0; i < values.size(); ++i) {
    if (!values[i]) nulls[i / 8] |= uint8_t(1u << (i % 8));
    else data.insert(data.end(), values[i]->begin(), values[i]->end());
  }
  return cat({nulls, data});
}

struct Spec {
  uint8_t mode = 0;
  Bytes types, meta, sign, names, pk, ppk, present, present_after, rows;
};

Bytes encode(const Spec& s) {
  Bytes v{s.mode};
  auto part = [&](const Bytes& b) {
    v.push_back(uint8_t(b.size()));
    v.insert(v.end(), b.begin(), b.end());
  };
  part(s.types);
  part(s.meta);
  part(s.sign);
  if (s.mode & 4) part(s.names);
  part(s.pk);
  part(s.ppk);
  if (s.mode & 8) {
    v.insert(v.end(), s.present.begin(), s.present.end());
    v.insert(v.end(), s.present_after.begin(), s.present_after.end());
  }
  v.insert(v.end(), s.rows.begin(), s.rows.end());
  return v;
}

// rubis.items-like: id INT UNSIGNED, category_id INT UNSIGNED, name VARCHAR(128), description
// TEXT, price DECIMAL(10,2), end_date DATETIME, status ENUM, qty SMALLINT, y YEAR, big BIGINT.
Spec items(uint8_t mode) {
  Spec s;
  s.mode = mode;
  s.types = {tLong, tLong, tVarchar, tBlob, tNewDecimal, tDateTime2, tString, tShort, tYear,
             tLongLong};
  s.meta = {128, 0, 2, 10, 2, 0, tEnum, 1};
  // SIGNEDNESS of id, category_id, price, qty, y, big (MSB first): 1 1 0 0 1 0.
  s.sign = {0xc8};
  s.pk = {0};
  return s;
}

Bytes item_row(uint32_t id, uint32_t cat_id, const std::string& name, bool nulls) {
  return image({le(id, 4), le(cat_id, 4), nulls ? std::nullopt : std::optional<Bytes>(str(name, 1)),
                str("a description", 2), Bytes(5, 0x80), Bytes(5, 0x99), le(2, 1),
                nulls ? std::nullopt : std::optional<Bytes>(le(0xfffe, 2)), le(124, 1),
                le(~0ull, 8)});
}

std::vector<Bytes> seeds() {
  std::vector<Bytes> out;
  Spec ins = items(0);
  ins.rows = cat({item_row(42, 7, "lamp", false), item_row(43, 8, "chair", true)});
  out.push_back(encode(ins));
  Spec upd = items(1);
  upd.rows = cat({item_row(42, 7, "lamp", false), item_row(42, 8, "lamp", false)});
  out.push_back(encode(upd));
  Spec del = items(2);
  del.rows = item_row(4294967295u, 0, "", true);
  out.push_back(encode(del));
  // Every skipped type, long strings, an after image of fewer columns.
  Spec wide;
  wide.mode = 1 | 8;
  wide.types = {tVarchar, tString, tBlob, tJson, tGeometry, tBit, tFloat, tDouble, tTime2,
                tTimestamp2, tInt24, tTiny};
  wide.meta = {0x2c, 0x01, 0xce, 0xfc, 3, 4, 4, 1, 2, 4, 8, 5, 6};
  wide.sign = {0x30};  // FLOAT, DOUBLE, INT24, TINY (MSB first): 0 0 1 1
  wide.present = {0xff, 0x0f};
  wide.present_after = {0xfe, 0x0f};
  Bytes before = image({str(std::string(300, 'v'), 2), str(std::string(260, 'c'), 2),
                        str("medium", 3), str("{\"k\": 1}", 4), str(std::string(25, 'g'), 4),
                        Bytes(3, 1), Bytes(4, 2), Bytes(8, 3), Bytes(6, 4), Bytes(7, 5),
                        le(0xffffff, 3), le(0xff, 1)});
  Bytes after = image({std::nullopt, str("medium2", 3), std::nullopt, std::nullopt, Bytes(3, 1),
                       Bytes(4, 2), Bytes(8, 3), Bytes(6, 4), Bytes(7, 5), le(1, 3), le(2, 1)});
  wide.rows = cat({before, after});
  out.push_back(encode(wide));
  // Column names and a prefixed primary key from the input; a column absent from the image.
  Spec named;
  named.mode = 4 | 8;
  named.types = {tLong, tVarchar, tLong};
  named.meta = {0x00, 0x01};
  named.sign = {0x40};
  named.names = {2, 'i', 'd', 4, 'n', 'a', 'm', 'e', 3, 'q', 't', 'y'};
  named.ppk = {1, 16, 0, 0};
  named.present = {0x05};
  named.present_after = {0x05};
  named.rows = cat({image({le(5, 4), le(6, 4)}), image({std::nullopt, le(1, 4)})});
  out.push_back(encode(named));
  // Twenty INT24 columns: a null bitmap of three bytes.
  Spec many;
  many.mode = 0;
  for (int i = 0; i < 20; ++i) many.types.push_back(tInt24);
  many.sign = {0xaa, 0xaa, 0xa0};
  std::vector<std::optional<Bytes>> v;
  for (int i = 0; i < 20; ++i)
    v.push_back(i % 7 == 3 ? std::nullopt : std::optional<Bytes>(le(0x800000u + i, 3)));
  many.rows = cat({image(v), image(v)});
  out.push_back(encode(many));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  tierce_fuzz::Driver<Bytes> d;
  d.name = "fuzz_binlog_rows";
  d.iterations = 200000;
  d.seeds = seeds();
  d.rng_seed = 20261129;
  // This format's own mutations (what is worth changing in it).
  {
    tierce_fuzz::BinaryMutations m;
    m.extend = true;
    m.own = {
        // A byte set to a column type, a length-byte count or a packed-integer marker.
        [](Bytes& v, std::mt19937_64& rng) {
          static const uint8_t kValues[] = {0,   1,   2,   3,   4,   5,   6,   7,   8,   9,
                                            10,  11,  12,  13,  14,  15,  16,  17,  18,  19,
                                            20,  140, 141, 245, 246, 247, 248, 249, 250, 251,
                                            252, 253, 254, 255, 0x30, 0x80, 0xce, 0xee};
          if (v.size() > 1) v[1 + rng() % (v.size() - 1)] = kValues[rng() % std::size(kValues)];
        },
        // A range repeated (more rows, longer parts).
        [](Bytes& v, std::mt19937_64& rng) {
          if (v.size() < 3 || v.size() > 4096) return;
          size_t a = 1 + rng() % (v.size() - 1), len = 1 + rng() % (v.size() - a);
          Bytes r(v.begin() + long(a), v.begin() + long(a + len));
          v.insert(v.begin() + long(a), r.begin(), r.end());
        },
    };
    d.mutate = m;
  }
  d.report = [] {
    uint64_t maps = 0, events = 0, rows = 0, values = 0;
    fuzz_binlog_rows_stats(&maps, &events, &rows, &values);
    return std::to_string(maps) + " table maps decoded, " + std::to_string(events) +
           " rows events (" + std::to_string(rows) + " rows, " + std::to_string(values) +
           " values)";
  };
  return tierce_fuzz::replay_main(argc, argv, d);
}
#endif  // TIERCE_LIBFUZZER
