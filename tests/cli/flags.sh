#!/usr/bin/env bash
# One spelling and one meaning per flag: walks every tool's --help and checks that a flag offered
# by several tools takes a value everywhere or nowhere, and is described the same everywhere
# (the option groups are defined once: model, training, evaluation, compute). The few flags whose
# description names the tool's own product or input are listed below with the reason.
source "$(dirname "$0")/common.bash"

for exe in "$XL_BIN"/xl-*; do
  [ -x "$exe" ] && "$exe" --help >"$(basename "$exe").help"
done
ls ./*.help >/dev/null 2>&1 || fail "no xl-* tools in $XL_BIN"

step "every flag has one spelling and one meaning across the tools"
python3 - ./*.help <<'PY' || fail "flags disagree across tools (see above)"
import re, sys
from collections import defaultdict

# Flags whose description says what this tool reads or writes.
PER_TOOL = {
    "output": "names the tool's product",
    "input": "names what the tool reads",
    "tokens": "names what the tool reads (and how)",
    "checkpoint": "names what the tool reads",
    "mem-len": "training memory, evaluation sweep or generation context",
    "tgt-len": "training segment, evaluation segment or prompt feeding",
    "batch-size": "training or evaluation streams",
    "max-tokens": "a training budget or an evaluation bound",
    "threads": "xl-ablate: threads of each tool it runs",
    "mode": "what the tool does",
    "split": "what the tool splits or evaluates",
    "allow-invalid-utf8": "what the tool reads",
    "jobs": "what runs in parallel",
    "plot": "what is drawn",
    "min-count": "vocab building", "max-size": "vocab building",
    "cmem-len": "training's compressed memory, an evaluation sweep or one evaluation's",
    "format": "xl-ablate's report is always a table by default, rows follow the terminal",
    "tensorboard": "xl-ablate: a directory per run",
}
flags = defaultdict(dict)  # flag -> tool -> (takes a value, description)
for path in sys.argv[1:]:
    tool = path[2:-5]
    cur = None
    for line in open(path):
        m = re.match(r"^  (?:-\w \[ )?--([a-z0-9-]+)(?: \])?( arg(?: \(=[^)]*\))?)?(\s{2,}(.*))?$", line.rstrip("\n"))
        if m:
            cur = m.group(1)
            flags[cur][tool] = [m.group(2) is not None, (m.group(4) or "").strip()]
        elif cur and re.match(r"^\s{20,}\S", line):
            flags[cur][tool][1] += " " + line.strip()
        else:
            cur = None
bad = 0
for flag, by_tool in sorted(flags.items()):
    if len(by_tool) < 2:
        continue
    arity = {t: v[0] for t, v in by_tool.items()}
    if len(set(arity.values())) > 1:
        print(f"--{flag} takes a value in {sorted(t for t, a in arity.items() if a)} "
              f"but is a switch in {sorted(t for t, a in arity.items() if not a)}")
        bad += 1
    if flag in PER_TOOL:
        continue
    descriptions = defaultdict(list)
    for t, v in by_tool.items():
        descriptions[v[1]].append(t)
    if len(descriptions) > 1:
        print(f"--{flag} has {len(descriptions)} meanings:")
        for d, tools in descriptions.items():
            print(f"    {sorted(tools)}: {d}")
        bad += 1
shared = sum(1 for f in flags.values() if len(f) > 1)
print(f"{len(flags)} flags, {shared} offered by several tools")
sys.exit(1 if bad else 0)
PY

step "--help reads in a terminal: description lines wrap near 100 columns (examples may run longer)"
awk 'length > 104 && !/^  xl-/ && !/^  make / {print FILENAME ": " length " columns: " substr($0, 1, 60) "..."; bad = 1}
     END {exit bad}' ./*.help || fail "a --help line runs past 104 columns"

step "booleans take true/false everywhere (no switch that means true and no int that means a boolean)"
for f in pre-lnorm same-length untie-r tie-weight; do
  grep -h -- "--$f " ./*.help | grep -q -- "--$f arg" || fail "--$f is not a value flag somewhere"
done
step "numbers are finite: nan and inf are refused on the command line (64) and in a config file (78)"
expect 64 xl-generate --temperature nan --prompt x no-such.h5
stderr_is_one_line "--temperature must be a finite number, not nan"
expect 64 xl-train-phase1 --lr inf --max-steps 1 no-such.h5 -o x.h5
stderr_is_one_line "--lr must be a finite number, not inf"
printf 'dropout = nan\n' >nan.ini
expect 78 xl-train-phase1 -c nan.ini --max-steps 1 no-such.h5 -o x.h5
stderr_is_one_line "dropout must be a finite number, not nan"
expect 64 xl-generate --temperature -0.5 --prompt x no-such.h5
stderr_is_one_line "--temperature must not be negative"
expect 64 xl-eval-longctx --threads -2 no-such.h5 no-such-tokens.h5
stderr_is_one_line "--threads must not be negative"

step "a bad value names where it was given: the flag (64) or the config file (78)"
printf 'device = gpu\n' >device.ini
expect 78 xl-eval-longctx -c device.ini no-such.h5 no-such-tokens.h5
stderr_is_one_line "device.ini: device must be auto, cpu, cuda or cuda:N, not 'gpu'"
expect 64 xl-eval-longctx --device gpu no-such.h5 no-such-tokens.h5
stderr_is_one_line "--device must be auto, cpu, cuda or cuda:N, not 'gpu'"
printf 'precision = fp8\nmax-tokens = 5Q\n' >eval.ini
expect 78 xl-eval-longctx -c eval.ini --precision fp32 no-such.h5 no-such-tokens.h5
stderr_is_one_line "eval.ini: max-tokens: bad size suffix in '5Q'"
printf 'min-count = -1\n' >vocab.ini
expect 78 xl-build-vocab -c vocab.ini --mode word no-such.txt
stderr_is_one_line "vocab.ini: min-count must not be negative"
printf 'split = 0.9,,0.1\n' >split.ini
expect 78 xl-tokenize -c split.ini --mode byte no-such.txt -o x.h5
stderr_is_one_line "split.ini: split: empty item in '0.9,,0.1'"
printf 'dist-backend = mpi\n' >dist.ini
expect 78 xl-train-phase1 -c dist.ini --max-steps 1 no-such.h5 -o x.h5
stderr_is_one_line "dist.ini: dist-backend must be auto, gloo or nccl, not 'mpi'"

step "lists: an empty item is a typo, refused (it was dropped: --mem-len 64,,128 swept two memories)"
expect 64 xl-eval-longctx --mem-len 64,,128 no-such.h5 no-such-tokens.h5
stderr_is_one_line "--mem-len: empty item in '64,,128'"
expect 64 xl-train-phase1 --cutoffs 2000,4000, --max-steps 1 no-such.h5 -o x.h5
stderr_is_one_line "--cutoffs: empty item in '2000,4000,'"

echo "all flag checks passed"
