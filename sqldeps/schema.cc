// sqldeps/schema.cc — Schema::parse_sql: CREATE TABLE bodies (columns, types, PRIMARY KEY as a
// column attribute, a bare KEY attribute, or a table constraint) and CREATE VIEW (its base tables,
// found by the same query scanner the deriver uses).
#include "sqldeps/schema.h"

#include <algorithm>
#include <stdexcept>

#include "sqldeps/deps.h"
#include "sqldeps/lexer.h"

namespace tierce::sqldeps {

int TableInfo::column_index(std::string_view column) const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == column) return int(i);
  return -1;
}

ColumnType TableInfo::type_of(std::string_view column) const {
  int i = column_index(column);
  return i < 0 || size_t(i) >= types.size() ? ColumnType::Opaque : types[size_t(i)];
}

const TableInfo* Schema::find(std::string_view table) const {
  auto it = tables_.find(table);
  return it == tables_.end() ? nullptr : &it->second;
}

const std::vector<std::string>* Schema::find_view(std::string_view name) const {
  auto it = views_.find(name);
  return it == views_.end() ? nullptr : &it->second;
}

void Schema::add_table(std::string name, TableInfo info) {
  views_.erase(name);
  tables_.insert_or_assign(std::move(name), std::move(info));
}

void Schema::add_view(std::string name, std::vector<std::string> tables) {
  tables_.erase(name);
  views_.insert_or_assign(std::move(name), std::move(tables));
}

namespace {

std::string lower_ascii(std::string s) {
  for (auto& c : s)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return s;
}

bool is_name(const Token& t) {
  return t.type == TokenType::Word || t.type == TokenType::QuotedName;
}

ColumnType type_class(const std::string& w) {
  static constexpr std::string_view kInt[] = {"tinyint", "smallint", "mediumint", "int",  "integer",
                                              "bigint",  "bool",     "boolean",   "bit",
                                              "serial",  "int1",     "int2",      "int3", "int4",
                                              "int8",    "middleint"};
  static constexpr std::string_view kNumber[] = {"decimal", "dec",    "numeric", "fixed",
                                                 "float",   "double", "real"};
  static constexpr std::string_view kText[] = {
      "char",      "varchar",  "text",       "tinytext",   "mediumtext", "longtext", "enum",
      "set",       "nchar",    "nvarchar",   "national",   "character",  "varcharacter",
      "binary",    "varbinary", "blob",      "tinyblob",   "mediumblob", "longblob", "long"};
  for (auto k : kInt)
    if (w == k) return ColumnType::Integer;
  for (auto k : kText)
    if (w == k) return ColumnType::Text;
  for (auto k : kNumber)
    if (w == k) return ColumnType::Other;
  return ColumnType::Opaque;
}

class DdlParser {
 public:
  DdlParser(std::string_view src, const std::vector<Token>& t, Schema& out)
      : src_(src), t_(t), out_(out) {}

  [[noreturn]] void fail(size_t i, const std::string& what) const {
    size_t off = i < t_.size() ? t_[i].offset : src_.size();
    throw std::invalid_argument("schema line " + std::to_string(line_of(src_, off)) + ": " + what);
  }

  // One statement: tokens [b, e).
  void statement(size_t b, size_t e) {
    if (b == e) return;
    if (t_[b].type != TokenType::Word) fail(b, "expected a SQL statement, found '" + t_[b].text + "'");
    if (!t_[b].word("create")) return;
    size_t i = b + 1;
    // CREATE [OR REPLACE] [TEMPORARY] TABLE | CREATE [OR REPLACE] [ALGORITHM=..] [DEFINER=..]
    // [SQL SECURITY ..] VIEW
    for (; i < e; ++i) {
      if (t_[i].word("table")) return table(i + 1, e);
      if (t_[i].word("view")) return view(i + 1, e);
      if (t_[i].word("index") || t_[i].word("procedure") || t_[i].word("function") ||
          t_[i].word("trigger") || t_[i].word("database") || t_[i].word("schema") ||
          t_[i].word("event") || t_[i].word("user"))
        return;
    }
  }

 private:
  std::string_view src_;
  const std::vector<Token>& t_;
  Schema& out_;

  // A possibly qualified name at i: returns its last part, lower-cased; i moves past it.
  std::string qualified_name(size_t& i, size_t e) {
    if (i >= e || !is_name(t_[i])) fail(i, "expected a table name");
    std::string n = t_[i++].text;
    while (i + 1 < e && t_[i].op(".") && is_name(t_[i + 1])) {
      n = t_[i + 1].text;
      i += 2;
    }
    return lower_ascii(n);
  }

  size_t matching_paren(size_t i, size_t e) const {
    int depth = 0;
    for (size_t k = i; k < e; ++k) {
      if (t_[k].op("(")) ++depth;
      if (t_[k].op(")") && --depth == 0) return k;
    }
    fail(i, "unbalanced parentheses");
  }

  void table(size_t i, size_t e) {
    if (i + 2 < e && t_[i].word("if") && t_[i + 1].word("not") && t_[i + 2].word("exists")) i += 3;
    std::string name = qualified_name(i, e);
    if (i < e && t_[i].word("like")) {  // CREATE TABLE a LIKE b
      ++i;
      std::string other = qualified_name(i, e);
      if (auto* info = out_.find(other)) out_.add_table(name, *info);
      return;
    }
    if (i >= e || !t_[i].op("(")) return;  // CREATE TABLE t SELECT ...: columns unknown
    if (i + 1 < e && t_[i + 1].word("like")) {
      size_t k = i + 2;
      std::string other = qualified_name(k, e);
      if (auto* info = out_.find(other)) out_.add_table(name, *info);
      return;
    }
    size_t close = matching_paren(i, e);
    if (i + 1 < e && (t_[i + 1].word("select") || t_[i + 1].word("with"))) return;
    TableInfo info;
    size_t d = i + 1;
    while (d < close) {
      size_t end = d;
      int depth = 0;
      while (end < close && !(depth == 0 && t_[end].op(","))) {
        if (t_[end].op("(")) ++depth;
        if (t_[end].op(")")) --depth;
        ++end;
      }
      definition(d, end, info);
      d = end + 1;
    }
    if (info.columns.empty()) fail(i, "CREATE TABLE " + name + " has no columns");
    out_.add_table(std::move(name), std::move(info));
  }

  void definition(size_t b, size_t e, TableInfo& info) {
    if (b >= e) fail(b, "empty column definition");
    const Token& first = t_[b];
    static constexpr std::string_view kConstraint[] = {
        "primary", "key", "index", "unique", "fulltext", "spatial", "constraint", "foreign", "check",
        "period",  "system"};
    if (first.type == TokenType::Word) {
      // `period` and `system` are constraints only as PERIOD FOR / SYSTEM VERSIONING (MariaDB).
      bool word_follows = b + 1 < e && t_[b + 1].type == TokenType::Word;
      for (auto k : kConstraint)
        if (first.text == k &&
            ((k != "period" && k != "system") ||
             (word_follows && (t_[b + 1].text == "for" || t_[b + 1].text == "versioning"))))
          return constraint(b, e, info);
    }
    if (!is_name(first)) fail(b, "expected a column name, found '" + first.text + "'");
    std::string col = lower_ascii(first.text);
    ColumnType type = ColumnType::Opaque;
    if (b + 1 < e && t_[b + 1].type == TokenType::Word) type = type_class(t_[b + 1].text);
    info.columns.push_back(col);
    info.types.push_back(type);
    // PRIMARY KEY, or a bare KEY, as a column attribute (not UNIQUE [KEY]).
    int depth = 0;
    for (size_t k = b + 2; k < e; ++k) {
      if (t_[k].op("(")) ++depth;
      if (t_[k].op(")")) --depth;
      if (depth != 0) continue;
      if (t_[k].word("primary") || (t_[k].word("key") && !t_[k - 1].word("unique"))) {
        info.primary_key = {col};
        break;
      }
    }
  }

  void constraint(size_t b, size_t e, TableInfo& info) {
    size_t k = b;
    while (k < e && !t_[k].word("primary")) {
      if (t_[k].op("(")) return;  // some other constraint
      ++k;
    }
    if (k >= e) return;
    while (k < e && !t_[k].op("(")) ++k;
    if (k >= e) fail(b, "PRIMARY KEY without a column list");
    size_t close = matching_paren(k, e);
    std::vector<std::string> pk;
    bool expect = true;
    int depth = 0;
    for (size_t j = k + 1; j < close; ++j) {
      if (t_[j].op("(")) ++depth;
      if (t_[j].op(")")) --depth;
      if (depth == 0 && t_[j].op(",")) {
        expect = true;
        continue;
      }
      if (expect && depth == 0) {
        if (!is_name(t_[j])) fail(j, "expected a column name in PRIMARY KEY");
        pk.push_back(lower_ascii(t_[j].text));
        expect = false;
      }
    }
    if (pk.empty()) fail(b, "empty PRIMARY KEY");
    info.primary_key = std::move(pk);
  }

  void view(size_t i, size_t e) {
    std::string name = qualified_name(i, e);
    if (i < e && t_[i].op("(")) i = matching_paren(i, e) + 1;
    if (i >= e || !t_[i].word("as")) fail(i, "CREATE VIEW " + name + " without AS");
    ++i;
    auto tables = detail::tables_of_query(t_, i, e);
    if (!tables) fail(i, "cannot read the query of view " + name);
    // A view over views reads their tables.
    std::vector<std::string> base;
    for (auto& t : *tables) {
      if (auto* inner = out_.find_view(t))
        base.insert(base.end(), inner->begin(), inner->end());
      else
        base.push_back(t);
    }
    std::sort(base.begin(), base.end());
    base.erase(std::unique(base.begin(), base.end()), base.end());
    out_.add_view(std::move(name), std::move(base));
  }
};

}  // namespace

Schema Schema::parse_sql(std::string_view ddl) {
  std::vector<Token> t = tokenize(ddl);
  Schema s;
  DdlParser p(ddl, t, s);
  size_t b = 0;
  for (size_t i = 0; i <= t.size(); ++i) {
    if (i < t.size() && t[i].type == TokenType::Error) {
      if (t[i].text.size() == 1)
        p.fail(i, "unexpected byte " + std::to_string((unsigned char)t[i].text[0]));
      p.fail(i, "unterminated string, quoted name or comment");
    }
    if (i == t.size() || t[i].type == TokenType::Semicolon) {
      p.statement(b, i);
      b = i + 1;
    }
  }
  return s;
}

}  // namespace tierce::sqldeps
