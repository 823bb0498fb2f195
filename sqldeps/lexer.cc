// sqldeps/lexer.cc — the tokenizer (lexer.h). One pass, no backtracking past the current token.
#include "sqldeps/lexer.h"

namespace tierce::sqldeps {
namespace {

bool is_space(unsigned char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool is_hex(unsigned char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}
// Bytes of a bare identifier: ASCII letters, digits, '_', '$' and any UTF-8 byte.
bool is_ident(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) || c == '_' || c == '$' ||
         c >= 0x80;
}
char lower(char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; }

// Lexes the next token of a TokenStream into `out`; one Lexer per token (its state lives in
// the stream, so a stream needs no allocation).
class Lexer {
 public:
  Lexer(TokenStream::State& st, Token& out)
      : s_(st.sql),
        i_(st.pos),
        next_param_(st.next_param),
        in_exec_comment_(st.in_exec_comment),
        prev_type_(st.prev_type),
        prev_close_paren_(st.prev_close_paren),
        cur_(&out) {}

  bool next() {
    while (!produced_ && skip_blanks()) lex_one();
    return produced_;
  }

 private:
  std::string_view s_;
  size_t& i_;
  int& next_param_;
  bool& in_exec_comment_;  // inside /*! ... */: its "*/" closes it
  // The previous token, for the one rule that looks back (a '.' after a name).
  TokenType& prev_type_;
  bool& prev_close_paren_;
  Token* cur_;  // where the token being lexed goes
  bool produced_ = false;

  unsigned char at(size_t k) const { return k < s_.size() ? (unsigned char)s_[k] : 0; }
  bool more(size_t k) const { return k < s_.size(); }

  void emit(TokenType t, size_t start, std::string_view text, int param = -1) {
    cur_->type = t;
    cur_->offset = uint32_t(start);
    cur_->param = param;
    cur_->text.assign(text.data(), text.size());
    done(t);
  }
  // The token whose text was built in cur_->text (decoded strings, lower-cased words).
  void emit_built(TokenType t, size_t start, int param = -1) {
    cur_->type = t;
    cur_->offset = uint32_t(start);
    cur_->param = param;
    done(t);
  }
  void done(TokenType t) {
    produced_ = true;
    prev_type_ = t;
    prev_close_paren_ = t == TokenType::Op && cur_->text == ")";
  }
  // s_[from, to) lower-cased into the token's text.
  void lowered(size_t from, size_t to) {
    std::string& w = cur_->text;
    w.assign(s_.data() + from, to - from);
    for (char& ch : w) ch = lower(ch);
  }
  // Length of the operator at i_ (2 or 3 bytes), 0 when it is a one-byte one.
  size_t long_op() const {
    unsigned char c = at(i_), n = at(i_ + 1), m = at(i_ + 2);
    switch (c) {
      case '<':
        if (n == '=') return m == '>' ? 3 : 2;  // <=> <=
        return n == '>' || n == '<' ? 2 : 0;    // <> <<
      case '-':
        if (n == '>') return m == '>' ? 3 : 2;  // ->> ->
        return 0;
      case '>': return n == '=' || n == '>' ? 2 : 0;  // >= >>
      case '!': return n == '=' ? 2 : 0;
      case ':': return n == '=' ? 2 : 0;
      case '|': return n == '|' ? 2 : 0;
      case '&': return n == '&' ? 2 : 0;
      default: return 0;
    }
  }
  void error_rest(size_t start) {
    emit(TokenType::Error, start, s_.substr(start));
    i_ = s_.size();
  }

  // Skips blanks and comments; false at the end of the input.
  bool skip_blanks() {
    for (;;) {
      if (!more(i_)) return false;
      unsigned char c = at(i_);
      if (is_space(c)) {
        ++i_;
      } else if (c == '#') {
        while (more(i_) && at(i_) != '\n') ++i_;
      } else if (c == '-' && at(i_ + 1) == '-' && (!more(i_ + 2) || at(i_ + 2) <= ' ')) {
        while (more(i_) && at(i_) != '\n') ++i_;
      } else if (c == '*' && at(i_ + 1) == '/' && in_exec_comment_) {
        in_exec_comment_ = false;
        i_ += 2;
      } else if (c == '/' && at(i_ + 1) == '*') {
        size_t start = i_;
        bool exec = false;
        size_t k = i_ + 2;
        if (at(k) == '!') {
          exec = true;
          ++k;
        } else if ((at(k) == 'M' || at(k) == 'm') && at(k + 1) == '!') {
          exec = true;
          k += 2;
        }
        if (exec && !in_exec_comment_) {
          // The version number (MySQL 5 digits, MariaDB 6) is not code.
          for (int n = 0; n < 6 && is_digit(at(k)); ++n) ++k;
          in_exec_comment_ = true;
          i_ = k;
          continue;
        }
        size_t end = s_.find("*/", i_ + 2);
        if (end == std::string_view::npos) {
          error_rest(start);
          return false;
        }
        i_ = end + 2;
      } else {
        return true;
      }
    }
  }

  // A quoted run starting at i_ (the quote), with doubled quotes and, for strings, backslash
  // escapes. Returns false (Error token emitted) when unterminated.
  bool quoted(char q, bool backslash, std::string& text) {
    size_t start = i_;
    size_t k = i_ + 1;
    for (;;) {
      if (!more(k)) {
        error_rest(start);
        return false;
      }
      char c = s_[k];
      if (c == q) {
        if (at(k + 1) == (unsigned char)q) {
          text += q;
          k += 2;
          continue;
        }
        i_ = k + 1;
        return true;
      }
      if (c == '\\' && backslash && more(k + 1)) {
        char e = s_[k + 1];
        switch (e) {
          case '0': text += '\0'; break;
          case 'b': text += '\b'; break;
          case 'n': text += '\n'; break;
          case 'r': text += '\r'; break;
          case 't': text += '\t'; break;
          case 'Z': text += '\x1a'; break;
          case '%': text += "\\%"; break;  // LIKE escapes keep their backslash
          case '_': text += "\\_"; break;
          default: text += e;
        }
        k += 2;
        continue;
      }
      text += c;
      ++k;
    }
  }

  void string_at(size_t start) {
    cur_->text.clear();
    char q = s_[i_];
    if (quoted(q, true, cur_->text)) emit_built(TokenType::String, start);
  }

  void lex_one() {
    size_t start = i_;
    unsigned char c = at(i_);
    unsigned char n = at(i_ + 1);
    // Literals with a one-letter prefix: X'..', B'..', N'..'.
    if ((c == 'x' || c == 'X' || c == 'b' || c == 'B') && n == '\'') {
      size_t end = s_.find('\'', i_ + 2);
      if (end == std::string_view::npos) return error_rest(start);
      i_ = end + 1;
      return emit(TokenType::Bits, start, s_.substr(start, i_ - start));
    }
    if ((c == 'n' || c == 'N') && n == '\'') {
      ++i_;
      return string_at(start);
    }
    if (c == '0' && (n == 'x' || n == 'b') && (n == 'x' ? is_hex(at(i_ + 2)) : (at(i_ + 2) == '0' || at(i_ + 2) == '1'))) {
      size_t k = i_ + 2;
      while (n == 'x' ? is_hex(at(k)) : (at(k) == '0' || at(k) == '1')) ++k;
      if (!is_ident(at(k))) {
        i_ = k;
        return emit(TokenType::Bits, start, s_.substr(start, k - start));
      }
      // else an identifier such as 0xg1: fall through to the word rule below.
    }
    if (is_digit(c) || (c == '.' && is_digit(n) && !prev_is_name())) return number_or_word(start);
    if (is_ident(c)) {
      size_t k = i_;
      while (is_ident(at(k))) ++k;
      bool underscore = c == '_';
      if (underscore && (at(k) == '\'' || at(k) == '"')) {  // _utf8mb4'x'
        i_ = k;
        return string_at(start);
      }
      lowered(i_, k);
      i_ = k;
      return emit_built(TokenType::Word, start);
    }
    switch (c) {
      case '\'':
      case '"':
        return string_at(start);
      case '`':
        cur_->text.clear();
        if (quoted('`', false, cur_->text)) emit_built(TokenType::QuotedName, start);
        return;
      case ';':
        ++i_;
        return emit(TokenType::Semicolon, start, ";");
      case '?':
        ++i_;
        return emit(TokenType::Param, start, "?", next_param_++);
      case '@': return variable(start);
      case ':':
        if (n == '=') break;
        if ((n >= 'a' && n <= 'z') || (n >= 'A' && n <= 'Z') || n == '_') {
          size_t k = i_ + 1;
          while (is_ident(at(k))) ++k;
          std::string_view name = s_.substr(i_ + 1, k - i_ - 1);
          i_ = k;
          return emit(TokenType::NamedParam, start, name);
        }
        break;
      default:
        break;
    }
    // <=> ->> <= >= <> != := || && << >> ->
    if (size_t len = long_op()) {
      i_ += len;
      return emit(TokenType::Op, start, s_.substr(start, len));
    }
    ++i_;
    if (c < 0x20 || c == 0x7f) return emit(TokenType::Error, start, s_.substr(start, 1));
    emit(TokenType::Op, start, s_.substr(start, 1));
  }

  // `.5` after a name is `t .5`? No: after a name or `)` a '.' is the qualifier dot (t.5col).
  bool prev_is_name() const {
    return prev_type_ == TokenType::Word || prev_type_ == TokenType::QuotedName || prev_close_paren_;
  }

  void number_or_word(size_t start) {
    size_t k = i_;
    while (is_digit(at(k))) ++k;
    bool frac = false;
    if (at(k) == '.') {
      frac = true;
      ++k;
      while (is_digit(at(k))) ++k;
    }
    if ((at(k) == 'e' || at(k) == 'E') &&
        (is_digit(at(k + 1)) || ((at(k + 1) == '+' || at(k + 1) == '-') && is_digit(at(k + 2))))) {
      k += 2;
      while (is_digit(at(k))) ++k;
    } else if (!frac && is_ident(at(k))) {
      // MySQL identifiers may start with digits (1abc): a word.
      while (is_ident(at(k))) ++k;
      lowered(i_, k);
      i_ = k;
      return emit_built(TokenType::Word, start);
    }
    i_ = k;
    emit(TokenType::Number, start, s_.substr(start, k - start));
  }

  void variable(size_t start) {
    size_t k = i_ + 1;
    if (at(k) == '@') ++k;
    unsigned char q = at(k);
    if (q == '\'' || q == '"' || q == '`') {
      i_ = k;
      cur_->text.assign(1, '@');
      if (quoted(char(q), q != '`', cur_->text)) emit_built(TokenType::Variable, start);
      return;
    }
    while (is_ident(at(k)) || at(k) == '.') ++k;
    lowered(i_, k);
    i_ = k;
    emit_built(TokenType::Variable, start);
  }
};

}  // namespace

bool TokenStream::next(Token& t) { return Lexer(st_, t).next(); }

std::vector<Token> tokenize(std::string_view sql, int first_param) {
  TokenStream in(sql, first_param);
  std::vector<Token> out;
  out.reserve(sql.size() / 4 + 4);  // ~one token per 4-5 bytes of typical SQL: no regrowth
  Token t;
  while (in.next(t)) out.push_back(std::move(t));
  return out;
}

size_t line_of(std::string_view sql, size_t offset) {
  size_t line = 1;
  for (size_t i = 0; i < offset && i < sql.size(); ++i) line += sql[i] == '\n';
  return line;
}

}  // namespace tierce::sqldeps
