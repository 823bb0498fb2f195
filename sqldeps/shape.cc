// sqldeps/shape.cc — see shape.h. One pass over a token stream (no token vector): a new text
// costs its lexing and the shape's string, nothing else.
#include "sqldeps/shape.h"

#include "sqldeps/lexer.h"

namespace tierce::sqldeps {
namespace {

bool is_verb(const Token& t) {
  return t.word("select") || t.word("insert") || t.word("update") || t.word("delete") ||
         t.word("replace");
}

}  // namespace

std::optional<Shape> shape_of(std::string_view sql) {
  TokenStream in(sql);
  Shape s;
  s.text.reserve(sql.size());
  Token t;
  bool verb_seen = false;  // leading '(' then one of the verbs
  bool literal = false;
  bool ended = false;      // a ';' was seen: only more ';' may follow
  // The previous token as the sign rule needs it: an operator other than ')'.
  bool prev_op = false;
  // A '+'/'-' held back: one literal with the number after it, when one follows.
  char sign = 0;
  auto put = [&](std::string_view piece) {
    if (!s.text.empty()) s.text += ' ';
    s.text += piece;
  };
  while (in.next(t)) {
    if (t.type == TokenType::Semicolon) {
      ended = true;
      continue;
    }
    if (ended) return std::nullopt;  // a second statement
    if (!verb_seen) {
      if (t.op("(")) {
        put("(");
        prev_op = true;
        continue;
      }
      if (!is_verb(t)) return std::nullopt;
      verb_seen = true;
    }
    if (sign) {
      if (t.type == TokenType::Number) {
        // A sign before a number where a value starts (after an operator other than ')'): one
        // literal, as the classifier reads `= -5`.
        put("?");
        s.values.positional.emplace_back(sign == '-' ? "-" + t.text : t.text);
        literal = true;
        sign = 0;
        prev_op = false;
        continue;
      }
      put(sign == '-' ? "-" : "+");
      sign = 0;
    }
    if ((t.op("-") || t.op("+")) && prev_op) {
      sign = t.text[0];
      continue;
    }
    prev_op = t.type == TokenType::Op && !t.op(")");
    switch (t.type) {
      case TokenType::String:
      case TokenType::Number:
        put("?");
        s.values.positional.emplace_back(t.text);
        literal = true;
        break;
      case TokenType::QuotedName:
        if (!s.text.empty()) s.text += ' ';
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
        put(t.text);
        break;
      case TokenType::Param:
      case TokenType::NamedParam:
      case TokenType::Semicolon:
      case TokenType::Error:
        return std::nullopt;
    }
  }
  if (sign) put(sign == '-' ? "-" : "+");
  if (!verb_seen || !literal) return std::nullopt;
  return s;
}

}  // namespace tierce::sqldeps
