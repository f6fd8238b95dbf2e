#!/usr/bin/env python3
"""Where a step's time goes, from the Chrome trace that XL_BENCH_PROFILE=FILE makes
bench/xl_bench_model write (LibTorch's autograd profiler, one step).

    python3 bench/profile_summary.py TRACE.json [TOP]

Prints each op's self time (its span less the spans of the ops it called) summed over the step,
largest first, and the share of the step's span; then xl's own ranges (the fused kernels and the
custom autograd nodes) with their inclusive time. The profiler times the host: on a GPU run it
under CUDA_LAUNCH_BLOCKING=1, so that each op's span holds its kernels' run time (each launch
then also waits for the one before, which adds a few microseconds a kernel)."""
import collections
import json
import re
import sys


def shown(name):
    """Custom autograd nodes by the function they differentiate."""
    m = re.fullmatch(r"torch::autograd::CppNode<(?:.*::)?(\w+)>", name)
    return "backward of " + m.group(1) if m else name


def self_times(events):
    """Self time and calls per name, and each thread's busy time (its outermost events' spans)."""
    by_tid = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            by_tid[e.get("tid")].append(e)
    self_us = collections.Counter()
    calls = collections.Counter()
    top_level = collections.Counter()
    for tid, evs in by_tid.items():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [event, children's time]
        def close(until):
            while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= until + 1e-3:
                e, child = stack.pop()
                self_us[e["name"]] += e["dur"] - child
                if stack:
                    stack[-1][1] += e["dur"]
        for e in evs:
            close(e["ts"])
            if not stack:
                top_level[tid] += e["dur"]
            calls[e["name"]] += 1
            stack.append([e, 0.0])
        close(float("inf"))
    return self_us, calls, top_level


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 25
    events = json.load(open(sys.argv[1]))
    xs = [e for e in events if e.get("ph") == "X"]
    if not xs:
        sys.exit("%s: no complete events (not an XL_BENCH_PROFILE trace?)" % sys.argv[1])
    span = max(e["ts"] + e["dur"] for e in xs) - min(e["ts"] for e in xs)
    self_us, calls, top_level = self_times(xs)
    print("step span %.1f ms, %d ops; busy per thread: %s" % (span / 1e3, len(xs), ", ".join(
        "%s %.1f ms" % (tid, us / 1e3) for tid, us in sorted(top_level.items(), key=lambda t: str(t[0])))))
    print("%-72s %6s %10s %6s" % ("self time", "calls", "ms", "share"))
    for name, us in self_us.most_common(top):
        print("%-72s %6d %10.2f %5.1f%%" % (shown(name)[:72], calls[name], us / 1e3, 100 * us / span))
    inclusive = collections.Counter()
    for e in xs:
        if "xl::" in e["name"] and not e["name"].startswith("autograd::engine::"):
            inclusive[e["name"]] += e["dur"]
    if inclusive:
        print("%-72s %6s %10s %6s" % ("xl's ranges (inclusive)", "calls", "ms", "share"))
        for name, us in inclusive.most_common(top):
            print("%-72s %6d %10.2f %5.1f%%" % (shown(name)[:72], calls[name], us / 1e3, 100 * us / span))


if __name__ == "__main__":
    main()
