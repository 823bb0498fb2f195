// sqldeps/lexer.h — a MySQL/MariaDB tokenizer for the statements an application sends: enough of
// the server's lexical rules to find keywords, identifiers, literals, parameters and statement
// boundaries exactly where the server does. Comments are dropped except executable ones
// (`/*! ... */`, `/*!50001 ... */`, `/*M!100100 ... */`), whose content the server runs and which
// are therefore lexed as code; optimizer hints (`/*+ ... */`) are dropped. Never throws, never
// reads out of bounds (fuzzed): an unterminated string, quoted identifier or comment becomes one
// Error token holding the rest of the input.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tierce::sqldeps {

enum class TokenType : uint8_t {
  Word,        // bare identifier or keyword; `text` lower-cased
  QuotedName,  // `backtick` identifier; `text` is the name (`` undoubled), case kept
  String,      // '...' / "..." / N'...' / _charset'...'; `text` decoded (escapes applied)
  Number,      // 42, 4.2, 1e3, .5; `text` as written
  Bits,        // X'..', 0x.., b'..', 0b..; `text` as written
  Param,       // `?`; `param` is its 0-based position in the whole input
  NamedParam,  // `:name` (PDO); `text` is the name without ':'
  Variable,    // @v, @'v', @@session.v; `text` as written, lower-cased
  Op,          // operators and punctuation: ( ) , . = <=> <> != <= >= := || && -> ->> etc.
  Semicolon,   // statement separator
  Error,       // unterminated string / quoted name / comment, or a byte that is no SQL
};

struct Token {
  TokenType type = TokenType::Error;
  uint32_t offset = 0;  // byte offset in the input (for messages: line numbers)
  int32_t param = -1;
  std::string text;

  bool is(TokenType t, std::string_view s) const { return type == t && text == s; }
  // A bare word equal to `kw` (lower case): keywords never match a `quoted` name.
  bool word(std::string_view kw) const { return type == TokenType::Word && text == kw; }
  bool op(std::string_view o) const { return type == TokenType::Op && text == o; }
};

// Tokens of `sql` in order; `?` are numbered from `first_param`.
std::vector<Token> tokenize(std::string_view sql, int first_param = 0);

// The same tokens one at a time, for a caller that looks at each once (query shapes): no vector,
// and the token's string storage is reused from one token to the next.
class TokenStream {
 public:
  explicit TokenStream(std::string_view sql, int first_param = 0)
      : st_{sql, 0, first_param, false, TokenType::Semicolon, false} {}
  bool next(Token& t);  // false at the end of the input

  struct State {  // where the lexer is (lexer.cc)
    std::string_view sql;
    size_t pos;
    int next_param;
    bool in_exec_comment;    // inside /*! ... */: its "*/" closes it
    TokenType prev_type;     // the previous token's, for a '.' after a name
    bool prev_close_paren;
  };

 private:
  State st_;
};

// 1-based line of byte `offset` in `sql`.
size_t line_of(std::string_view sql, size_t offset);

}  // namespace tierce::sqldeps
