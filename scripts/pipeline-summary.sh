#!/usr/bin/env bash
# pipeline-summary.sh DIR: a Markdown summary of what a Makefile.pipeline chain produced in DIR.
set -euo pipefail
dir=$1
python3 - "$dir" <<'PY'
import json, os, sys
d = sys.argv[1]
def events(path):
    if not os.path.exists(path): return []
    return [json.loads(l) for l in open(path) if l.strip()]
def last(evs, kind):
    xs = [e for e in evs if e.get("event") == kind]
    return xs[-1] if xs else {}
print(f"# xl pipeline summary: {d}\n")
print("| phase | steps | tokens | train time | best valid | tok/s | peak RSS MB |")
print("|---|---:|---:|---:|---:|---:|---:|")
before = 0  # tokens count on from phase 1: a phase's own tokens are the difference
for phase in ("p1", "p2"):
    evs = events(os.path.join(d, phase + ".jsonl"))
    done = last(evs, "done")
    valid = [e for e in evs if e.get("event") == "valid"]
    best = min(valid, key=lambda e: e["loss"]) if valid else {}
    metric = "bpc" if "bpc" in best else "ppl"
    own = done.get("tokens", before) - before
    rate = own / done["elapsed"] if done.get("elapsed") else 0
    print(f"| {phase} | {done.get('phase_steps', '')} | {own} | {done.get('elapsed', 0):.0f} s | "
          f"{best.get(metric, float('nan')):.4f} {metric} | {rate:.0f} | {done.get('peak_rss_mb', 0):.0f} |")
    before = done.get("tokens", before)
rows = events(os.path.join(d, "eval.jsonl"))
if rows:
    metric = "bpc" if "bpc" in rows[0] else "ppl"
    print(f"\n## Test {metric} by evaluation memory\n")
    print(f"| tgt_len | mem_len | tokens | {metric} | tok/s |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['tgt_len']} | {r['mem_len']} | {r['tokens']} | {r[metric]:.4f} | {r.get('tokens_per_s', 0):.0f} |")
heads = [r for r in events(os.path.join(d, "heads.jsonl")) if "layer" in r and "head" in r]
if heads:
    key = "delta_bpc" if "delta_bpc" in heads[0] else "delta_ppl"
    layers = sorted({r["layer"] for r in heads})
    nh = max(r["head"] for r in heads) + 1
    print(f"\n## Change in {key[6:]} when one head is pruned\n")
    print("| layer | " + " | ".join(f"H{h+1}" for h in range(nh)) + " |")
    print("|---|" + "---:|" * nh)
    for l in layers:
        vals = {r["head"]: r[key] for r in heads if r["layer"] == l}
        print(f"| {l+1} | " + " | ".join(f"{vals.get(h, float('nan')):+.4f}" for h in range(nh)) + " |")
print("\nFiles: " + ", ".join(sorted(f for f in os.listdir(d) if not f.startswith("."))))
PY
