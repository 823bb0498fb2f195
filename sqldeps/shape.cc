// sqldeps/shape.cc — see shape.h.
#include "sqldeps/shape.h"

#include "sqldeps/lexer.h"

namespace tierce::sqldeps {

std::optional<Shape> shape_of(std::string_view sql) {
  std::vector<Token> tokens = tokenize(sql);
  size_t n = tokens.size();
  while (n > 0 && tokens[n - 1].type == TokenType::Semicolon) --n;  // trailing ';'
  if (n == 0) return std::nullopt;
  size_t first = 0;
  while (first < n && tokens[first].op("(")) ++first;
  if (first >= n) return std::nullopt;
  const Token& verb = tokens[first];
  if (!(verb.word("select") || verb.word("insert") || verb.word("update") ||
        verb.word("delete") || verb.word("replace")))
    return std::nullopt;
  Shape s;
  s.text.reserve(sql.size());
  bool literal = false;
  for (size_t i = 0; i < n; ++i) {
    const Token& t = tokens[i];
    if (i) s.text += ' ';
    // A sign before a number where a value starts (after an operator other than ')'): one
    // literal, as the classifier reads `= -5`.
    if ((t.op("-") || t.op("+")) && i + 1 < n && tokens[i + 1].type == TokenType::Number &&
        i > 0 && tokens[i - 1].type == TokenType::Op && !tokens[i - 1].op(")")) {
      s.text += '?';
      s.values.positional.emplace_back((t.op("-") ? "-" : "") + tokens[i + 1].text);
      literal = true;
      ++i;
      continue;
    }
    switch (t.type) {
      case TokenType::String:
      case TokenType::Number:
        s.text += '?';
        s.values.positional.emplace_back(t.text);
        literal = true;
        break;
      case TokenType::QuotedName:
        s.text += '`';
        for (char c : t.text) {
          if (c == '`') s.text += '`';
          s.text += c;
        }
        s.text += '`';
        break;
      case TokenType::Word:
      case TokenType::Bits:
      case TokenType::Variable:
      case TokenType::Op:
        s.text += t.text;
        break;
      case TokenType::Param:
      case TokenType::NamedParam:
      case TokenType::Semicolon:
      case TokenType::Error:
        return std::nullopt;
    }
  }
  if (!literal) return std::nullopt;
  return s;
}

}  // namespace tierce::sqldeps
