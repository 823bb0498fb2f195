// agents/binlogd/row_decoder.cc — TABLE_MAP and ROW events decoded (row_decoder.h).
#include "agents/binlogd/row_decoder.h"

#include <array>

namespace tierce::binlogd {
namespace {

using base::Code;
using sqldeps::ColumnType;

// enum_field_types (mariadb_com.h), the values the binlog carries.
enum : uint8_t {
  kDecimal = 0, kTiny = 1, kShort = 2, kLong = 3, kFloat = 4, kDouble = 5, kNull = 6,
  kTimestamp = 7, kLongLong = 8, kInt24 = 9, kDate = 10, kTime = 11, kDateTime = 12, kYear = 13,
  kNewDate = 14, kVarchar = 15, kBit = 16, kTimestamp2 = 17, kDateTime2 = 18, kTime2 = 19,
  kBlobCompressed = 140, kVarcharCompressed = 141, kJson = 245, kNewDecimal = 246, kEnum = 247,
  kSet = 248, kTinyBlob = 249, kMediumBlob = 250, kLongBlob = 251, kBlob = 252, kVarString = 253,
  kString = 254, kGeometry = 255,
};

size_t meta_bytes(uint8_t type) {
  switch (type) {
    case kVarchar: case kVarString: case kNewDecimal: case kString: case kEnum: case kSet:
    case kBit: case kVarcharCompressed:
      return 2;
    case kBlob: case kTinyBlob: case kMediumBlob: case kLongBlob: case kDouble: case kFloat:
    case kGeometry: case kJson: case kTimestamp2: case kDateTime2: case kTime2:
    case kBlobCompressed:
      return 1;
    default:
      return 0;
  }
}

// The columns the SIGNEDNESS bitmap has a bit for: the server's numeric fields (Field_num),
// YEAR included (a Field_tiny, always "unsigned"). Without YEAR here, every integer after a YEAR
// column would read its neighbour's bit.
bool numeric(uint8_t type) {
  switch (type) {
    case kDecimal: case kTiny: case kShort: case kLong: case kFloat: case kDouble: case kLongLong:
    case kInt24: case kYear: case kNewDecimal:
      return true;
    default:
      return false;
  }
}

// A packed (length-encoded) integer; nullopt past the end.
std::optional<uint64_t> packed(std::span<const uint8_t> b, size_t& at) {
  if (at >= b.size()) return std::nullopt;
  uint8_t first = b[at++];
  size_t n = first < 251 ? 0 : first == 252 ? 2 : first == 253 ? 3 : first == 254 ? 8 : SIZE_MAX;
  if (first < 251) return first;
  if (n == SIZE_MAX || at + n > b.size()) return std::nullopt;
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(b[at + i]) << (8 * i);
  at += n;
  return v;
}

uint64_t le(const uint8_t* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

size_t decimal_size(unsigned precision, unsigned scale) {
  static constexpr std::array<size_t, 10> kDigits{0, 1, 1, 2, 2, 3, 3, 4, 4, 4};
  unsigned intg = precision > scale ? precision - scale : 0;
  return (intg / 9) * 4 + kDigits[intg % 9] + (scale / 9) * 4 + kDigits[scale % 9];
}

bool bit(std::span<const uint8_t> bits, size_t i) {
  return i / 8 < bits.size() && (bits[i / 8] >> (i % 8)) & 1;
}

// STRING's metadata: the real type (CHAR, ENUM, SET) and the maximum length in bytes.
std::pair<uint8_t, unsigned> string_meta(uint16_t meta) {
  uint8_t b0 = uint8_t(meta & 0xff), b1 = uint8_t(meta >> 8);
  if ((b0 & 0x30) != 0x30) return {uint8_t(b0 | 0x30), unsigned(((b0 & 0x30) ^ 0x30) << 4) | b1};
  return {b0, b1};
}

struct Reader {
  std::span<const uint8_t> b;
  size_t at = 0;
  bool take(size_t n) {
    if (n > b.size() - at) return false;
    at += n;
    return true;
  }
};

// One value of column `c`: its text when an integer or a string, nullopt otherwise (skipped by
// its size). False when it does not fit or the type is unknown.
bool read_value(const TableMap& t, size_t c, Reader& r, std::optional<std::string>& out) {
  uint8_t type = t.types[c];
  uint16_t meta = t.meta[c];
  size_t start = r.at;
  auto integer = [&](size_t n) {
    if (!r.take(n)) return false;
    uint64_t v = le(r.b.data() + start, n);
    if (t.is_unsigned[c]) {
      out = std::to_string(v);
    } else {
      if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign-extend
      out = std::to_string(int64_t(v));
    }
    return true;
  };
  auto string = [&](size_t len_bytes) {
    if (!r.take(len_bytes)) return false;
    size_t n = le(r.b.data() + start, len_bytes);
    if (!r.take(n)) return false;
    out = std::string(reinterpret_cast<const char*>(r.b.data() + start + len_bytes), n);
    return true;
  };
  out.reset();
  switch (type) {
    case kTiny: return integer(1);
    case kShort: return integer(2);
    case kInt24: return integer(3);
    case kLong: return integer(4);
    case kLongLong: return integer(8);
    case kFloat: return r.take(4);
    case kDouble: return r.take(8);
    case kNull: return true;
    case kYear: return r.take(1);
    case kDate: case kNewDate: case kTime: return r.take(3);
    case kTimestamp: return r.take(4);
    case kDateTime: return r.take(8);
    case kTimestamp2: return r.take(4 + (meta + 1) / 2);
    case kDateTime2: return r.take(5 + (meta + 1) / 2);
    case kTime2: return r.take(3 + (meta + 1) / 2);
    case kNewDecimal: return r.take(decimal_size(meta & 0xff, meta >> 8));
    case kBit: return r.take((meta >> 8) + ((meta & 0xff) ? 1 : 0));
    case kVarchar: case kVarString: return string(meta < 256 ? 1 : 2);
    case kVarcharCompressed:  // compressed bytes: skipped, unknown
      if (!string(meta < 256 ? 1 : 2)) return false;
      out.reset();
      return true;
    case kString: {
      auto [real, max] = string_meta(meta);
      if (real == kEnum || real == kSet) return r.take(meta >> 8);  // a position: unknown
      return string(max < 256 ? 1 : 2);
    }
    case kEnum: case kSet: return r.take(meta >> 8);
    case kBlob: case kTinyBlob: case kMediumBlob: case kLongBlob:
      return meta >= 1 && meta <= 4 && string(meta);
    case kJson: case kGeometry: case kBlobCompressed:
      if (!(meta >= 1 && meta <= 4 && string(meta))) return false;
      out.reset();
      return true;
    default:
      return false;  // DECIMAL (pre-5.0) and anything newer than this decoder
  }
}

base::Status row_image(const TableMap& t, std::span<const uint8_t> present, Reader& r,
                       sqldeps::RowImage& out) {
  size_t n = t.types.size(), count = 0;
  for (size_t c = 0; c < n; ++c) count += bit(present, c);
  size_t null_start = r.at;
  if (!r.take((count + 7) / 8))
    return {Code::InvalidArgument, "row image cut in its null bitmap", "BINLOGD0102"};
  std::span<const uint8_t> nulls = r.b.subspan(null_start, (count + 7) / 8);
  out.assign(n, std::nullopt);
  for (size_t c = 0, k = 0; c < n; ++c) {
    if (!bit(present, c)) continue;  // not in the image: unknown
    bool is_null = bit(nulls, k++);
    if (is_null) continue;
    if (!read_value(t, c, r, out[c]))
      return {Code::InvalidArgument,
              "row image of " + t.database + "." + t.table.name + ": column " +
                  std::to_string(c) + " (binlog type " + std::to_string(t.types[c]) +
                  ") cannot be read (past the event's end, or a type this agent does not know)",
              "BINLOGD0102"};
  }
  return {};
}

}  // namespace

bool value_readable(uint8_t type, uint16_t meta) {
  switch (type) {
    case kTiny: case kShort: case kInt24: case kLong: case kLongLong: case kVarchar:
    case kVarString: case kBlob: case kTinyBlob: case kMediumBlob: case kLongBlob:
      return true;
    case kString: {
      uint8_t real = string_meta(meta).first;
      return real != kEnum && real != kSet;
    }
    default:
      return false;
  }
}

sqldeps::ColumnType column_class(uint8_t type, uint16_t /*meta*/) {
  switch (type) {
    case kTiny: case kShort: case kInt24: case kLong: case kLongLong: case kBit:
      return ColumnType::Integer;
    case kFloat: case kDouble: case kDecimal: case kNewDecimal:
      return ColumnType::Other;
    case kVarchar: case kVarString: case kBlob: case kTinyBlob: case kMediumBlob: case kLongBlob:
    case kEnum: case kSet: case kVarcharCompressed: case kBlobCompressed:
      return ColumnType::Text;
    case kString:
      return ColumnType::Text;  // CHAR, ENUM, SET: text columns (ENUM/SET values are unknown)
    default:
      return ColumnType::Opaque;
  }
}

base::Result<TableMap> decode_table_map(const TableMapParts& p) {
  TableMap t;
  t.id = p.id;
  t.database = p.database;
  t.table.name = p.table;
  size_t n = p.column_types.size();
  t.types.assign(p.column_types.begin(), p.column_types.end());
  t.meta.assign(n, 0);
  t.is_unsigned.assign(n, false);
  auto bad = [&](const std::string& what) {
    return base::Result<TableMap>(Code::InvalidArgument,
                                  "table map of " + p.database + "." + p.table + ": " + what,
                                  "BINLOGD0101");
  };
  size_t at = 0;
  for (size_t c = 0; c < n; ++c) {
    size_t m = meta_bytes(t.types[c]);
    if (at + m > p.metadata.size()) return bad("column metadata shorter than its types need");
    t.meta[c] = uint16_t(m == 0 ? 0 : m == 1 ? p.metadata[at] : p.metadata[at] | p.metadata[at + 1] << 8);
    at += m;
  }
  for (size_t c = 0, k = 0; c < n; ++c)
    if (numeric(t.types[c])) {
      // SIGNEDNESS: one bit per numeric column, the most significant bit first; 1 = unsigned.
      if (k / 8 < p.signedness.size()) t.is_unsigned[c] = (p.signedness[k / 8] >> (7 - k % 8)) & 1;
      ++k;
    }
  at = 0;
  while (at < p.column_names.size()) {
    auto len = packed(p.column_names, at);
    if (!len || *len > p.column_names.size() - at) return bad("column names cut short");
    t.table.columns.emplace_back(reinterpret_cast<const char*>(p.column_names.data() + at), *len);
    at += *len;
  }
  if (t.table.columns.size() != n)
    return bad("the event names " + std::to_string(t.table.columns.size()) + " of " +
               std::to_string(n) + " columns (binlog_row_metadata must be FULL)");
  for (size_t c = 0; c < n; ++c) t.table.types.push_back(column_class(t.types[c], t.meta[c]));
  at = 0;
  while (at < p.simple_pk.size()) {
    auto c = packed(p.simple_pk, at);
    if (!c || *c >= n) return bad("primary key names a column it does not have");
    t.table.primary_key.push_back(size_t(*c));
  }
  at = 0;
  while (at < p.prefixed_pk.size()) {
    auto c = packed(p.prefixed_pk, at);
    auto prefix = packed(p.prefixed_pk, at);
    if (!c || !prefix || *c >= n) return bad("primary key names a column it does not have");
    t.table.primary_key.push_back(size_t(*c));
  }
  return t;
}

base::Result<std::vector<RowPair>> decode_rows(const TableMap& t, sqldeps::RowChange kind,
                                               std::span<const uint8_t> present,
                                               std::span<const uint8_t> present_after,
                                               std::span<const uint8_t> rows) {
  std::vector<RowPair> out;
  Reader r{rows};
  while (r.at < rows.size()) {
    RowPair pair;
    base::Status s;
    size_t start = r.at;
    switch (kind) {
      case sqldeps::RowChange::Insert: s = row_image(t, present, r, pair.after); break;
      case sqldeps::RowChange::Delete: s = row_image(t, present, r, pair.before); break;
      case sqldeps::RowChange::Update:
        s = row_image(t, present, r, pair.before);
        if (s.ok()) s = row_image(t, present_after, r, pair.after);
        break;
    }
    if (!s.ok()) return s;
    // An image of no column (an empty column bitmap) takes no byte: the bytes left cannot be
    // rows of it, and reading on would never end.
    if (r.at == start)
      return base::Status(Code::InvalidArgument,
                          "row image of " + t.database + "." + t.table.name +
                              ": the event's column bitmap is empty, yet " +
                              std::to_string(rows.size() - r.at) + " bytes of rows remain",
                          "BINLOGD0102");
    out.push_back(std::move(pair));
  }
  return out;
}

}  // namespace tierce::binlogd
