#!/usr/bin/env python3
"""The shape rules of issue 25 for the shell scripts: every script at most 300 lines, no heredoc
over 50 lines (code that long belongs in a real file under scripts/lib, where it is linted).

Called by scripts/lint.sh as
    python3 scripts/lib/script_shape.py FILE...
Prints one line per file (its length and longest heredoc) and one FAIL line per broken rule;
exits 1 if any. EXEMPT files are reported but not held to the rules.
"""
import re
import sys

MAX_LINES = 300
MAX_HEREDOC = 50
# Scripts waiting for a rewrite, not held to the rules meanwhile (none now).
EXEMPT = set()

# <<WORD, <<-WORD, <<'WORD', <<"WORD"; not <<< (a here-string) and not a shift (1 << 2).
HEREDOC = re.compile(r"(?<!<)<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")


def heredocs(lines):
    """(first line number, body length, delimiter) of every heredoc."""
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        m = None if line.lstrip().startswith("#") else HEREDOC.search(line)
        if not m:
            i += 1
            continue
        strip_tabs, word = m.group(1) == "-", m.group(3)
        j = i + 1
        while j < len(lines) and (lines[j].lstrip("\t") if strip_tabs else lines[j]) != word:
            j += 1
        out.append((i + 1, j - i - 1, word))
        i = j + 1
    return out


def main(paths):
    bad = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        docs = heredocs(lines)
        longest = max(docs, key=lambda d: d[1], default=None)
        problems = []
        if len(lines) > MAX_LINES:
            problems.append(f"{len(lines)} lines > {MAX_LINES}: move helpers to scripts/lib/*.sh")
        problems += [f"line {start}: heredoc {word} of {n} lines > {MAX_HEREDOC}: make it a file in "
                     "scripts/lib (.py, .js, .yml) and call it" for start, n, word in docs if n > MAX_HEREDOC]
        verdict = "exempt" if path in EXEMPT else "FAIL" if problems else "ok"
        print(f"  {verdict:<6} {path}: {len(lines)} lines, longest heredoc "
              + (f"{longest[1]} lines (line {longest[0]}, {longest[2]})" if longest else "none"))
        if path not in EXEMPT:
            for p in problems:
                print(f"         {p}")
            bad += len(problems)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
