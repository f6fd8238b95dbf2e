#!/usr/bin/env bash
# Throughput of the data tools: xl-tokenize in byte, char and word mode (vocab built from the
# train split, output to a file), word mode with --pretokenize moses, xl-tokenize --decode all
# (bytes, and Moses words back to text), and xl-build-vocab. Each number is the median wall time
# of RUNS fresh processes; MB/s counts input bytes (10^6). Where Python can import sacremoses (not
# part of xl), Hugging Face's TransfoXL pipeline over the same text runs beside it
# ("huggingface_moses": its normaliser and tokenizer as transformers calls them, and the number
# split), and "moses_speedup" is its median over xl's. Prints one JSON object.
#
#   bench/tokenize.sh [INPUT]    INPUT defaults to ../shared/data/enwik8/enwik8.head-4154064
#   env: XL_BIN (default build/bin), RUNS (default 5), PYTHON (default python3; for sacremoses)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bin=${XL_BIN:-$root/build/bin}
input=${1:-$root/../shared/data/enwik8/enwik8.head-4154064}
runs=${RUNS:-5}
[ -f "$input" ] || {
  echo "bench/tokenize.sh: no input file $input" >&2
  exit 66
}
for t in xl-tokenize xl-build-vocab xl-inspect; do
  [ -x "$bin/$t" ] || {
    echo "bench/tokenize.sh: $bin/$t not built" >&2
    exit 66
  }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$bin" "$input" "$runs" "$tmp" "${PYTHON:-python3}" <<'EOF'
import json, os, statistics, subprocess, sys, time

bin_dir, path, runs, tmp, python = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
size = os.path.getsize(path)


def run_once(argv):
    """Wall seconds, CPU seconds (user + system) and peak RSS (MB) of one fresh process; fails
    loudly on a nonzero exit. CPU time is the steadier number on a busy machine."""
    start = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    seconds = time.perf_counter() - start
    err = p.stderr.read().decode(errors="replace")
    p.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"bench: {' '.join(argv)} failed: {err.strip()}")
    return seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def measure(argv, nbytes=size):
    samples = [run_once(argv) for _ in range(runs)]
    seconds = statistics.median(s for s, _, _ in samples)
    cpu = statistics.median(c for _, c, _ in samples)
    return {
        "seconds": round(seconds, 4),
        "min_seconds": round(min(s for s, _, _ in samples), 4),
        "mb_per_s": round(nbytes / 1e6 / seconds, 2),
        "cpu_seconds": round(cpu, 4),
        "mb_per_cpu_s": round(nbytes / 1e6 / cpu, 2) if cpu > 0 else None,
        "max_rss_mb": round(max(r for _, _, r in samples), 1),
    }


tool = lambda name: os.path.join(bin_dir, name)
result = {
    "bench": "tokenize",
    "input": os.path.abspath(path),
    "bytes": size,
    "runs": runs,
    "cpus": os.cpu_count(),
    "load_avg_1m_before": round(os.getloadavg()[0], 2),
}
# The fixed cost of starting a tool (loading its libraries) is part of every run below.
startup = measure([tool("xl-tokenize"), "--version"])
result["startup_s"] = startup["seconds"]
result["startup_min_s"] = startup["min_seconds"]
result["startup_cpu_s"] = startup["cpu_seconds"]
result["startup_max_rss_mb"] = startup["max_rss_mb"]

result["tokenize"] = {}
for mode in ["byte", "char", "word"]:
    out = os.path.join(tmp, f"{mode}.h5")
    argv = [tool("xl-tokenize"), "-q", "-f", "--mode", mode, "--allow-invalid-utf8", path, "-o", out]
    if mode == "byte":
        argv.remove("--allow-invalid-utf8")
    m = measure(argv)
    # Fastest run less the fastest start: the tokenizing itself, less sensitive to a busy machine.
    work = m["min_seconds"] - startup["min_seconds"]
    m["mb_per_s_without_startup"] = round(size / 1e6 / work, 2) if work > 0 else None
    work_cpu = m["cpu_seconds"] - startup["cpu_seconds"]
    m["mb_per_cpu_s_without_startup"] = round(size / 1e6 / work_cpu, 2) if work_cpu > 0 else None
    info = json.loads(subprocess.run([tool("xl-inspect"), "--json", out], check=True,
                                     capture_output=True).stdout)
    m["tokens"] = info["total_tokens"]
    m["vocab_size"] = info["vocab"]["size"]
    m["output_bytes"] = os.path.getsize(out)
    result["tokenize"][mode] = m

moses_out = os.path.join(tmp, "word-moses.h5")
m = measure([tool("xl-tokenize"), "-q", "-f", "--mode", "word", "--pretokenize", "moses", path, "-o", moses_out])
info = json.loads(subprocess.run([tool("xl-inspect"), "--json", moses_out], check=True, capture_output=True).stdout)
m["tokens"], m["vocab_size"] = info["total_tokens"], info["vocab"]["size"]
result["tokenize"]["word_moses"] = m

decoded = os.path.join(tmp, "decoded.txt")
m = measure([tool("xl-tokenize"), "-q", "-f", "--decode", "all", os.path.join(tmp, "byte.h5"), "-o", decoded])
result["decode_all_byte"] = m
result["decode_all_word_moses"] = measure(
    [tool("xl-tokenize"), "-q", "-f", "--pretokenize", "moses", "--decode", "all", moses_out, "-o", decoded])

# Hugging Face's TransfoXLTokenizer splits each line so (moses_pipeline), beside xl where it can run.
hf = """
import re, sys, sacremoses
norm, tok = sacremoses.MosesPunctNormalizer("en"), sacremoses.MosesTokenizer("en")
n = 0
for line in open(sys.argv[1], encoding="utf-8"):
    words = tok.tokenize(norm.normalize(line.strip()), aggressive_dash_splits=True, return_str=False,
                         escape=False, protected_patterns=["<eos>", "<unk>", "<formula>"])
    n += sum(len(re.sub(r"(?<=\\d)[,.](?=\\d)", r" @\\g<0>@ ", w).split()) for w in words) + 1
"""
if subprocess.run([python, "-c", "import sacremoses"], capture_output=True).returncode == 0:
    result["huggingface_moses"] = measure([python, "-c", hf, path])
    result["moses_speedup"] = round(result["huggingface_moses"]["seconds"] / result["tokenize"]["word_moses"]["seconds"], 2)

result["build_vocab"] = {}
for mode in ["byte", "char", "word"]:
    out = os.path.join(tmp, f"{mode}.tsv")
    result["build_vocab"][mode] = measure(
        [tool("xl-build-vocab"), "-q", "-f", "--mode", mode, "--allow-invalid-utf8", path, "-o", out])
result["load_avg_1m_after"] = round(os.getloadavg()[0], 2)
print(json.dumps(result, indent=2))
EOF
