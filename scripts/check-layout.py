#!/usr/bin/env python3
"""Checks the house rules of xl's source tree (doc/conventions.md, "Layout"):

  rooms     which folders of lib/xl/ may include which (kernels/ and compute/ never reach into the
            model, training or the command line; tools never include a kernel)
  sizes     no source file over 600 lines, no function over 120, no tool over 80
  tests     tests/unit/ mirrors lib/xl/: a folder of tests for each room, none for a room that
            does not exist

Prints one line per breach (file:line: what) and exits 1 if there is any. --self-test checks the
checker on a small tree of its own with one breach of each kind.
"""
import os
import re
import sys
import tempfile

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 120
MAX_TOOL_LINES = 80
SOURCE_SUFFIXES = (".h", ".cpp", ".cu", ".cuh", ".inc")
SOURCE_DIRS = ("lib", "tools", "tests", "bench", "fuzz")
# A function may stay whole past the limit only where splitting it costs speed (a kernel's inner
# loop); this comment, within the three lines above it, says so and why.
WHOLE_MARK = "layout: whole"

# Which rooms a room's files may not include. Rooms are lib/xl/<folder>; kernels/cpu and
# kernels/cuda are the room "kernels".
FORBIDDEN = {
    "compute": {"model", "train", "cli", "kernels", "eval", "analysis", "ablate", "options", "interop", "checkpoint"},
    "kernels": {"model", "train", "cli", "eval", "analysis", "ablate", "options", "interop", "checkpoint"},
}
# Rooms that may include kernels/: the model, and training where it must (none today).
MAY_INCLUDE_KERNELS = {"model", "kernels"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"xl/([^"]+)"', re.M)


def room_of(path_in_xl):
    return path_in_xl.split("/")[0] if "/" in path_in_xl else "."


def source_files(root, dirs=SOURCE_DIRS):
    for d in dirs:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, d)):
            dirnames[:] = sorted(n for n in dirnames if not n.startswith("."))
            for name in sorted(filenames):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.join(dirpath, name)


def check_rooms(root):
    breaches = []
    lib = os.path.join(root, "lib", "xl")
    for path in source_files(root):
        rel = os.path.relpath(path, root)
        text = open(path, encoding="utf-8", errors="replace").read()
        if rel.startswith("lib/xl/"):
            room = room_of(os.path.relpath(path, lib))
        elif rel.startswith("tools/"):
            room = "tools"
        else:
            continue  # tests, benchmarks and fuzzers may reach any room
        for m in INCLUDE.finditer(text):
            target = room_of(m.group(1))
            line = text.count("\n", 0, m.start()) + 1
            if target == room:
                continue
            if target in FORBIDDEN.get(room, ()):
                breaches.append(f"{rel}:{line}: {room}/ includes {target}/ ({m.group(1)})")
            elif target == "kernels" and room not in MAY_INCLUDE_KERNELS:
                breaches.append(f"{rel}:{line}: only model/ includes kernels/ ({m.group(1)})")
    return breaches


def blank_out(text):
    """Comments, string and character literals and preprocessor lines as spaces (newlines kept)."""
    pattern = re.compile(
        r'//[^\n]*|/\*.*?\*/|R"(\w*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|^[ \t]*#(?:[^\n]*\\\n)*[^\n]*',
        re.S | re.M)
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


TEMPLATE_PREFIX = re.compile(r"^\s*template\s*<")


def scope_kind(head):
    """What a '{' opens, from the code since the previous ';', '{' or '}'."""
    h = " ".join(head.split())
    # template <class T, ...> before a declaration
    while TEMPLATE_PREFIX.match(h):
        depth, i = 0, h.index("<")
        for i in range(h.index("<"), len(h)):
            depth += {"<": 1, ">": -1}.get(h[i], 0)
            if depth == 0:
                break
        h = h[i + 1:].strip()
    if re.match(r"^(inline\s+)?namespace\b", h) or re.match(r"^extern\s*$", h):
        return "namespace"
    if re.match(r"^((typedef|alignas\([^)]*\))\s+)*(class|struct|union|enum)\b", h) and "(" not in h.split("{")[0].split(":")[0]:
        return "class"
    if "(" in h:
        before_paren = h[:h.index("(")]
        if "=" in before_paren and "operator" not in before_paren and not before_paren.rstrip().endswith("]"):
            # auto f = [...](...) {   a lambda kept in a variable counts as a function
            return "function" if re.search(r"\]\s*\(", h) or re.search(r"=\s*\[", h) else "other"
        return "function"
    return "other"


def functions(text):
    """(first line, last line, name) of each function defined at namespace or class scope."""
    code = blank_out(text)
    stack = []  # (kind, head start offset)
    head_start = 0
    found = []
    for i, c in enumerate(code):
        if c == "{":
            head = code[head_start:i]
            enclosing = stack[-1][0] if stack else "namespace"
            if enclosing in ("namespace", "class"):
                kind = scope_kind(head)
                # a class member's initializer, `int x{0};`, opens no function
            else:
                kind = "inner"
            offset = head_start + (len(head) - len(head.lstrip()))
            stack.append((kind, offset, head))
            head_start = i + 1
        elif c == "}":
            if stack:
                kind, offset, head = stack.pop()
                if kind == "function":
                    first = code.count("\n", 0, offset) + 1
                    last = code.count("\n", 0, i) + 1
                    names = [n for n in re.findall(r"([~\w:]+)\s*\(", " ".join(head.split()))
                             if n not in ("__launch_bounds__", "__attribute__", "alignas", "__align__")]
                    found.append((first, last, names[0] if names else "?"))
            head_start = i + 1
        elif c == ";":
            head_start = i + 1
        elif c == ":" and stack and stack[-1][0] == "class" and re.search(r"\b(public|private|protected)\s*$", code[head_start:i]):
            head_start = i + 1
    return found


def check_sizes(root):
    breaches = []
    for path in source_files(root):
        rel = os.path.relpath(path, root)
        text = open(path, encoding="utf-8", errors="replace").read()
        lines = text.count("\n") + (0 if text.endswith("\n") else 1)
        if rel.startswith("tools/") and lines > MAX_TOOL_LINES:
            breaches.append(f"{rel}:1: a tool of {lines} lines (at most {MAX_TOOL_LINES}: its work belongs in lib/)")
        elif lines > MAX_FILE_LINES:
            breaches.append(f"{rel}:1: {lines} lines (at most {MAX_FILE_LINES})")
        if rel.endswith(".inc"):
            continue  # tables
        source_lines = text.split("\n")
        for first, last, name in functions(text):
            length = last - first + 1
            if length <= MAX_FUNCTION_LINES:
                continue
            above = "\n".join(source_lines[max(0, first - 4):first - 1])
            if WHOLE_MARK in above:
                continue
            breaches.append(f"{rel}:{first}: {name} is {length} lines (at most {MAX_FUNCTION_LINES})")
    return breaches


def check_tests(root):
    breaches = []
    lib = os.path.join(root, "lib", "xl")
    unit = os.path.join(root, "tests", "unit")
    rooms = sorted(d for d in os.listdir(lib) if os.path.isdir(os.path.join(lib, d)))
    for room in rooms:
        folder = os.path.join(unit, room)
        if not os.path.isdir(folder) or not any(f.endswith("_test.cpp") for f in os.listdir(folder)):
            breaches.append(f"tests/unit/{room}/: no unit tests for lib/xl/{room}/")
    for entry in sorted(os.listdir(unit)):
        path = os.path.join(unit, entry)
        if os.path.isdir(path) and entry not in rooms and entry != "support":
            breaches.append(f"tests/unit/{entry}/: no room lib/xl/{entry}/ to test")
        elif os.path.isfile(path) and entry.endswith(".cpp"):
            breaches.append(f"tests/unit/{entry}: a test outside its room's folder")
    return breaches


def check(root):
    return check_rooms(root) + check_sizes(root) + check_tests(root)


def self_test():
    """One breach of each kind in a tree of its own: each must be found, and nothing else."""
    with tempfile.TemporaryDirectory() as root:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            open(os.path.join(root, rel), "w").write(text)
        body = lambda n: "int f(int x) {\n" + "  x += 1;\n" * (n - 2) + "}\n"
        write("lib/xl/kernels/cpu/a.cpp", '#include "xl/model/m.h"\n#include "xl/compute/c.h"\n' + body(120))
        write("lib/xl/compute/c.h", "namespace xl::compute {\nstruct S {\n  int g() {\n    return 1;\n  }\n};\n}\n")
        write("lib/xl/model/m.cpp", "namespace xl::model {\n" + body(121) + "// layout: whole (a kernel's inner loop)\n" + body(130) + "}\n")
        write("lib/xl/train/t.cpp", '#include "xl/kernels/cpu/k.h"\n' + "int x = 0;\n" * 601)
        write("tools/xl-x.cpp", "int main() {\n" + "  ;\n" * 80 + "}\n")
        for room in ("kernels", "compute", "model"):
            write(f"tests/unit/{room}/{room}_test.cpp", "\n")
        write("tests/unit/stray_test.cpp", "\n")
        got = check(root)
        expected = [
            "lib/xl/kernels/cpu/a.cpp:1: kernels/ includes model/",
            "lib/xl/train/t.cpp:1: only model/ includes kernels/",
            "lib/xl/model/m.cpp:2: f is 121 lines",
            "lib/xl/train/t.cpp:1: 602 lines",
            "tools/xl-x.cpp:1: a tool of 82 lines",
            "tests/unit/train/: no unit tests",
            "tests/unit/stray_test.cpp: a test outside",
        ]
        missing = [e for e in expected if not any(g.startswith(e) for g in got)]
        extra = [g for g in got if not any(g.startswith(e) for e in expected)]
        for line in missing:
            print(f"check-layout self-test: not found: {line}")
        for line in extra:
            print(f"check-layout self-test: found wrongly: {line}")
        return 1 if missing or extra else 0


def main(argv):
    if "--self-test" in argv:
        return self_test()
    root = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    breaches = check(os.path.abspath(root))
    for line in breaches:
        print(line)
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
