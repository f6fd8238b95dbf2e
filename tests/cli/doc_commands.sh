#!/usr/bin/env bash
# The commands that README.md and doc/*.md show work as written: every `xl-*` command line in their
# fenced code blocks (and in inline code that starts with a tool's name) uses only flags that the
# tool's --help lists; every `make -f Makefile.pipeline TARGET` names a target Makefile.pipeline
# has; and every torchrun line spells its flags one way, all with dashes (PyTorch 2 and later) or
# all with underscores (Debian 12's PyTorch 1.13 knows no other), never mixed. A breach is one line
# naming the page, the line and the flag.
source "$(dirname "${BASH_SOURCE[0]}")/common.bash"

command -v python3 >/dev/null || { echo "skipped: no python3"; exit 77; }
ls "$XL_BIN"/xl-* >/dev/null 2>&1 || fail "no xl-* tools in $XL_BIN"

step "each tool's --help"
for exe in "$XL_BIN"/xl-*; do
  [ -x "$exe" ] || continue
  "$exe" --help >"$(basename "$exe").help" 2>"$(basename "$exe").help-err" &
done
wait
for h in ./*.help; do
  [ -s "$h" ] || fail "${h#./}: --help wrote nothing ($(head -c 300 "${h}-err"))"
done

step "the commands of README.md and doc/*.md against the tools' flags, Makefile.pipeline and torchrun"
pages=("$XL_SOURCE_DIR/README.md")
for p in "$XL_SOURCE_DIR"/doc/*.md; do [ -f "$p" ] && pages+=("$p"); done
python3 - "$XL_SOURCE_DIR" "$TMP" "${pages[@]}" <<'PY' || fail "the docs show commands that do not work as written (above)"
import os, re, shlex, sys

src, helps, pages = sys.argv[1], sys.argv[2], sys.argv[3:]

# --- what exists: each tool's flags, Makefile.pipeline's targets
OPTION = re.compile(r"^\s{2,}(?:-\w(?:,| \[)\s*)?--([a-z0-9][a-z0-9-]*)")
flags = {}
for name in os.listdir(helps):
    if name.endswith(".help"):
        flags[name[:-5]] = {m.group(1) for m in map(OPTION.match, open(os.path.join(helps, name))) if m}
targets = set()
for line in open(os.path.join(src, "Makefile.pipeline")):
    m = re.match(r"^([A-Za-z0-9_.-]+(?:\s+[A-Za-z0-9_.-]+)*)\s*:(?!=)", line)
    if m and not line.startswith("."):
        targets.update(m.group(1).split())
    if line.startswith(".PHONY:"):
        targets.update(line.split(":", 1)[1].split())

breaches = []
counts = {"xl": 0, "make": 0, "torchrun": 0}

def breach(where, what):
    breaches.append(f"{where[0]}:{where[1]}: {what}")

# --- the shell lines a page shows: (page, [(text, [line of each character])])
def code_lines(page):
    rel = os.path.relpath(page, src)
    fenced, out, pending, pending_lines = False, [], "", []
    para, para_lines = "", []  # prose, a paragraph at a time: inline code may span lines

    def prose_done():
        for m in re.finditer(r"(`+)(.+?)\1", para):
            span = m.group(2).strip()
            if re.match(r"(xl-[a-z0-9-]+|make -f Makefile\.pipeline|torchrun)\s", span):
                at = m.start(2) + (len(m.group(2)) - len(m.group(2).lstrip()))
                out.append((span, para_lines[at: at + len(span)]))

    for n, line in enumerate(open(page, encoding="utf-8"), 1):
        line = line.rstrip("\n")
        if re.match(r"^\s*(```|~~~)", line):
            if not fenced:
                prose_done()
                para, para_lines = "", []
            fenced = not fenced
            pending, pending_lines = "", []
            continue
        if fenced:
            text = strip_comment(line)
            if text.endswith("\\"):
                pending += text[:-1] + " "
                pending_lines += [n] * len(text)
                continue
            out.append((pending + text, pending_lines + [n] * len(text)))
            pending, pending_lines = "", []
        elif line.strip():
            para += line + " "
            para_lines += [n] * (len(line) + 1)
        else:
            prose_done()
            para, para_lines = "", []
    prose_done()
    return rel, out

def strip_comment(line):
    """The line without its shell comment (an unquoted # at the start or after a blank)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line

def substitutions(text, lines):
    """$(...) taken out: the outer text with each replaced by a word, and the inner ones."""
    inner = []
    while True:
        m = re.search(r"\$\(([^()]*)\)", text)
        if not m:
            return text, lines, inner
        inner.append((m.group(1), lines[m.start(1):m.end(1)]))
        word = "SUBST" + "_" * (m.end() - m.start() - 5)  # same length: the line map stays valid
        text = text[:m.start()] + word[: m.end() - m.start()] + text[m.end():]

def command_at(text, start):
    """The end of the command that starts at `start`: a closing quote it sits in, or an unquoted
    | ; & > < or ), whichever comes first."""
    quote = None
    for c in text[:start]:
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
    outer, q = quote, None
    for i in range(start, len(text)):
        c = text[i]
        if q:
            if c == q:
                q = None
        elif outer and c == outer:
            return i
        elif c in "'\"":
            q = c
        elif c in "|;&<>)":
            return i
    return len(text)

TOOL = re.compile(r"(?:^|(?<=[\s|('\"/;&]))(xl-[a-z0-9-]+)(?=\s|$|['\")])")
FLAG = re.compile(r"(?:^|(?<=\s))--([A-Za-z0-9][A-Za-z0-9_-]*)")

def check(rel, text, lines):
    text, lines, inner = substitutions(text, lines)
    for t, l in inner:
        check(rel, t, l)
    for m in TOOL.finditer(text):
        tool = m.group(1)
        if text[m.start() - 1: m.start()] == "/" and not re.search(r"(bin|BIN\))/xl-", text[max(0, m.start() - 8): m.end()]):
            continue  # a path that only looks like a tool's name
        counts["xl"] += 1
        if tool not in flags:
            breach((rel, lines[m.start()]), f"{tool}: no such tool in the build")
            continue
        end = command_at(text, m.end())
        segment = text[m.end():end]
        for f in FLAG.finditer(segment):
            name = f.group(1).split("=")[0]
            if name not in flags[tool]:
                breach((rel, lines[m.end() + f.start()]), f"{tool} has no --{name} (not in its --help)")
    for m in re.finditer(r"(?:^|(?<=[\s'\"(]))torchrun(?=\s)", text):
        counts["torchrun"] += 1
        end = command_at(text, m.end())
        segment = text[m.end():end]
        tool = TOOL.search(segment)
        own = segment[: tool.start()] if tool else segment
        dash = [f.group(1) for f in FLAG.finditer(own) if "-" in f.group(1)]
        under = [f.group(1) for f in FLAG.finditer(own) if "_" in f.group(1)]
        if dash and under:
            breach((rel, lines[m.start()]),
                   f"torchrun mixes spellings: --{under[0]} (PyTorch 1.13's) with --{dash[0]} (PyTorch 2's); "
                   "use one: all dashes, or all underscores")
    for m in re.finditer(r"(?:^|(?<=[\s'\"(]))make\s+-f\s+Makefile\.pipeline\b", text):
        counts["make"] += 1
        end = command_at(text, m.end())
        try:
            words = shlex.split(text[m.end():end])
        except ValueError as e:
            breach((rel, lines[m.start()]), f"make -f Makefile.pipeline: cannot read its words ({e})")
            continue
        for w in words:
            if w.startswith("-") or "=" in w:
                continue
            if w not in targets:
                breach((rel, lines[m.start()]), f"make -f Makefile.pipeline {w}: Makefile.pipeline has no target {w}")

for page in pages:
    rel, shown = code_lines(page)
    for text, lines in shown:
        check(rel, text, lines)

for b in breaches:
    print(b)
print(f"  checked {counts['xl']} xl commands, {counts['make']} make lines and {counts['torchrun']} torchrun lines "
      f"in {len(pages)} pages")
if counts["xl"] == 0:
    print("no xl commands found in the docs: the extraction is broken")
    sys.exit(1)
sys.exit(1 if breaches else 0)
PY

echo "PASS"
