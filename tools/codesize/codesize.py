#!/usr/bin/env python3
"""Size limits of the product's C/C++ code (issue 30): no source file over MAX_FILE lines and no
function body over MAX_FUNCTION lines, so that no file or function grows back into a god object.

  codesize.py --root DIR              check (exit 1 listing what is over)
  codesize.py --root DIR --report N   the N longest files and functions, limits or not
  codesize.py --self-test             proves the function finder and both limits catch a violation

Product code is every .cc/.h/.c/.cpp outside tests/, benchmarks/, build directories and
third-party folders. A function is a brace block whose opening `{` follows a `)` (after
qualifiers such as const, noexcept, override, a trailing return type or a constructor's
initializer list) at namespace or class level; lambdas and blocks inside it count toward it.
Comments, string and character literals are blanked before the braces are matched.

Exceptions are listed in ALLOW with the reason; keep that list short.
"""
import argparse
import os
import re
import sys
import tempfile

MAX_FILE = 1000
MAX_FUNCTION = 150
SOURCE_EXT = (".cc", ".h", ".c", ".cpp")
SKIP_DIRS = {"tests", "benchmarks", ".git", "docs", "third_party", "node_modules"}
# path (relative to the root) -> why it may exceed the file limit. Each entry is a debt with its
# reason; the check fails when an entry is no longer needed (the file shrank), so the list only
# shrinks.
ALLOW = {
}
# (path, function) -> why it may exceed the function limit; the same rules.
ALLOW_FUNCTIONS = {
}


def strip_code(text):
    """Blank comments and literals (keeping newlines) so braces and parentheses are code only."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            # a digit separator (1'000) is not a character literal
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


HEADER_TAIL = re.compile(
    r"\)\s*(?:const\s*|noexcept(?:\s*\([^()]*\))?\s*|override\s*|final\s*|mutable\s*|"
    r"&&?\s*|->\s*[\w:<>,\s*&]+?\s*)*$")
INIT_LIST = re.compile(r"\)\s*(?:noexcept\s*)?:\s*[\w:]+\s*[({]", re.S)
CONTROL = re.compile(r"\b(if|for|while|switch|catch|return|sizeof|decltype|alignof|static_assert)\s*\($")


def functions(text):
    """(name, first line, line count) of each function body at namespace or class level."""
    code = strip_code(text)
    found = []
    stack = []          # for each open brace: (is_function, start offset, name)
    in_function = 0
    for m in re.finditer(r"[{}]", code):
        pos = m.start()
        if m.group() == "{":
            is_fn = False
            name = ""
            if in_function == 0:
                head = code[max(0, pos - 2000):pos]
                # the text since the previous ; { or } at this level
                cut = max(head.rfind(";"), head.rfind("{"), head.rfind("}"))
                decl = head[cut + 1:]
                stripped = decl.rstrip()
                if HEADER_TAIL.search(stripped) or INIT_LIST.search(decl):
                    # the name: the identifier before the parameter list's "("
                    depth = 0
                    k = len(decl) - 1
                    close = decl.find(")")
                    # find the "(" that opens the (first) parameter list: the first top-level "("
                    paren = None
                    depth = 0
                    for idx, ch in enumerate(decl):
                        if ch == "(":
                            if depth == 0 and paren is None:
                                paren = idx
                            depth += 1
                        elif ch == ")":
                            depth -= 1
                    if paren is not None:
                        before = decl[:paren].rstrip()
                        nm = re.search(r"([~\w:]+(?:operator\s*\S+)?)\s*$", before)
                        name = nm.group(1) if nm else ""
                        if name and not CONTROL.search(decl[:paren + 1].strip()) and \
                                name not in {"if", "for", "while", "switch", "catch", "return"}:
                            is_fn = True
            if is_fn:
                in_function += 1
            elif in_function:
                in_function += 1
            stack.append((is_fn, pos, name))
        else:
            if not stack:
                continue
            is_fn, start, name = stack.pop()
            if in_function:
                in_function -= 1
            if is_fn:
                first = code.count("\n", 0, start) + 1
                last = code.count("\n", 0, pos) + 1
                found.append((name, first, last - first + 1))
    return found


def product_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        parts = [] if rel == "." else rel.split(os.sep)
        dirnames[:] = sorted(d for d in dirnames
                             if d not in SKIP_DIRS and not d.startswith("build") and not d.startswith("."))
        if parts and (parts[0] in SKIP_DIRS or parts[0].startswith("build")):
            continue
        for f in sorted(filenames):
            if f.endswith(SOURCE_EXT):
                yield os.path.join(rel, f) if parts else f


def measure(root):
    files, funcs = [], []
    for rel in product_files(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        files.append((rel, text.count("\n") + (0 if text.endswith("\n") else 1)))
        for name, first, count in functions(text):
            funcs.append((rel, name, first, count))
    return files, funcs


def check(root, allow=None, allow_functions=None):
    allow = ALLOW if allow is None else allow
    allow_functions = ALLOW_FUNCTIONS if allow_functions is None else allow_functions
    files, funcs = measure(root)
    problems = []
    sizes = dict(files)
    for rel, lines in files:
        if lines > MAX_FILE and rel not in allow:
            problems.append(f"{rel}: {lines} lines (limit {MAX_FILE}): split it by concern")
    for rel, why in allow.items():
        if rel in sizes and sizes[rel] <= MAX_FILE:
            problems.append(f"{rel}: within the limit now: remove it from ALLOW ({why})")
    long_functions = set()
    for rel, name, first, count in funcs:
        if count > MAX_FUNCTION:
            long_functions.add((rel, name))
            if (rel, name) not in allow_functions:
                problems.append(f"{rel}:{first}: function {name} is {count} lines (limit {MAX_FUNCTION})")
    for key, why in allow_functions.items():
        if key[0] in sizes and key not in long_functions:
            problems.append(f"{key[0]}: function {key[1]} is within the limit now: remove it from "
                            f"ALLOW_FUNCTIONS ({why})")
    return problems, files, funcs


def self_test():
    ok = True
    sample = '''
namespace a {
int small(int x) { return x + 1; }
struct S {
  S(int v) : v_(v) { if (v) { v_ = 2; } }
  int get() const noexcept { return v_; }
  int v_;
};
auto trailing(int x) -> int {
  const char* s = "}{";  // }
  char c = '}';
  return x;
}
}
'''
    found = {n: c for n, _, c in functions(sample)}
    want = {"small": 1, "S": 1, "get": 1, "trailing": 5}
    if found != want:
        print(f"self-test: functions found {found}, want {want}")
        ok = False
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "lib"))
        os.makedirs(os.path.join(d, "tests"))
        body = "\n".join(f"  x += {i};" for i in range(MAX_FUNCTION + 5))
        with open(os.path.join(d, "lib", "long.cc"), "w") as fh:
            fh.write("int long_one(int x) {\n" + body + "\n  return x;\n}\n")
        with open(os.path.join(d, "lib", "big.h"), "w") as fh:
            fh.write("// filler\n" * (MAX_FILE + 1))
        with open(os.path.join(d, "tests", "ignored.cc"), "w") as fh:
            fh.write("// filler\n" * (MAX_FILE + 1))
        problems, _, _ = check(d, allow={}, allow_functions={})
        text = "\n".join(problems)
        if "long_one" not in text:
            print("self-test: a function over the limit was not reported")
            ok = False
        if "lib/big.h" not in text:
            print("self-test: a file over the limit was not reported")
            ok = False
        if "ignored.cc" in text:
            print("self-test: a file under tests/ was reported")
            ok = False
        allowed, _, _ = check(d, allow={"lib/big.h": "t"}, allow_functions={("lib/long.cc", "long_one"): "t"})
        if allowed:
            print(f"self-test: allowed debts still reported: {allowed}")
            ok = False
        stale, _, _ = check(d, allow={"lib/big.h": "t", "lib/long.cc": "t"},
                            allow_functions={("lib/long.cc", "long_one"): "t", ("lib/long.cc", "gone"): "t"})
        if len(stale) != 2:
            print(f"self-test: entries no longer needed were not reported: {stale}")
            ok = False
    print("self-test passed" if ok else "self-test FAILED")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--report", type=int, metavar="N")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    problems, files, funcs = check(os.path.abspath(args.root))
    if args.report:
        print(f"{len(files)} files, {len(funcs)} functions; "
              f"{sum(1 for f in files if f[1] > MAX_FILE)} files over {MAX_FILE} lines, "
              f"{sum(1 for f in funcs if f[3] > 100)} functions over 100 lines, "
              f"{sum(1 for f in funcs if f[3] > MAX_FUNCTION)} over {MAX_FUNCTION}")
        print("longest files:")
        for rel, lines in sorted(files, key=lambda f: -f[1])[:args.report]:
            print(f"  {lines:6d}  {rel}")
        print("longest functions:")
        for rel, name, first, count in sorted(funcs, key=lambda f: -f[3])[:args.report]:
            print(f"  {count:6d}  {rel}:{first} {name}")
        return 0
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} over the limits (tools/codesize/codesize.py; issue 30)")
        return 1
    print(f"codesize: {len(files)} files, {len(funcs)} functions, all within "
          f"{MAX_FILE} lines a file and {MAX_FUNCTION} a function but the "
          f"{len(ALLOW) + len(ALLOW_FUNCTIONS)} listed debts")
    return 0


if __name__ == "__main__":
    sys.exit(main())
