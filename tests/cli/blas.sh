#!/usr/bin/env bash
# The BLAS kernels a tool runs: with -v a training names the CPU, OpenBLAS's kernel set and how
# OpenMP's workers wait (the tools' short spin, or the user's setting); on a CPU with AVX-512 that
# set is an AVX-512 one, whether OpenBLAS picks for itself or the environment names older kernels
# (OPENBLAS_CORETYPE=Haswell); XL_BLAS_CORE=keep keeps what the environment says and
# XL_BLAS_CORE=NAME runs NAME; the kernel set changes losses only by rounding.
source "$(dirname "$0")/common.bash"

corpus=$(training_corpus)
xl-tokenize --mode byte --split 0.9,0.05,0.05 "$corpus" -o tokens.h5 -q
T="xl-train-phase1 --n-layer 2 --d-model 32 --n-head 2 --d-head 16 --d-inner 64 --tgt-len 32 --mem-len 32
   --batch-size 4 --dropout 0 --eval-interval 0 --log-interval 1 --max-steps 6 --threads 1 -v"
blas_line() { grep -m1 "BLAS: " "$TMP/err" || fail "no BLAS line with -v: $(head -5 "$TMP/err")"; }

step "-v names the CPU and the BLAS kernels"
expect 0 env -u XL_BLAS_CORE -u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT $T tokens.h5 -o own.h5
line=$(blas_line)
echo "$line"

step "-v names how OpenMP's workers wait: passively after a short spin, or as the user says"
grep -q "OpenMP workers wait: PASSIVE after 20000 spins" <<<"$line" || fail "not the tools' waiting policy: $line"
expect 0 env GOMP_SPINCOUNT=0 OMP_WAIT_POLICY=ACTIVE $T tokens.h5 -o waits.h5
blas_line | grep -q "OpenMP workers wait: ACTIVE after 0 spins" || fail "the user's policy is not kept: $(blas_line)"

if ! grep -q "BLAS: OpenBLAS" <<<"$line"; then
  echo "SKIP: the BLAS is not OpenBLAS, nothing more to check"
  exit 0
fi
flags=$(grep -m1 '^flags' /proc/cpuinfo)
avx512=1
for f in avx512f avx512bw avx512dq avx512vl; do grep -qw "$f" <<<"$flags" || avx512=0; done
wide="(SkylakeX|Cooperlake|SapphireRapids) kernels"
[ "$avx512" = 0 ] || grep -qE "$wide" <<<"$line" || fail "AVX-512 CPU without AVX-512 kernels: $line"

step "an inherited OPENBLAS_CORETYPE older than the CPU is upgraded"
expect 0 env -u XL_BLAS_CORE OPENBLAS_CORETYPE=Sandybridge $T tokens.h5 -o auto.h5 --metrics auto.jsonl
line=$(blas_line)
echo "$line"
if grep -qw avx2 <<<"$flags"; then
  grep -q "chosen by xl for this CPU over Sandybridge" <<<"$line" || fail "Sandybridge kernels not upgraded: $line"
  [ "$avx512" = 0 ] || grep -qE "$wide" <<<"$line" || fail "AVX-512 CPU without AVX-512 kernels: $line"
fi

step "XL_BLAS_CORE=keep keeps it, XL_BLAS_CORE=NAME runs NAME"
expect 0 env XL_BLAS_CORE=keep OPENBLAS_CORETYPE=Sandybridge $T tokens.h5 -o keep.h5 --metrics keep.jsonl
blas_line | grep -q "Sandybridge kernels (OPENBLAS_CORETYPE=Sandybridge)" || fail "keep did not keep: $(blas_line)"
expect 0 env -u OPENBLAS_CORETYPE XL_BLAS_CORE=Sandybridge $T tokens.h5 -o named.h5
blas_line | grep -q "Sandybridge kernels (XL_BLAS_CORE=Sandybridge)" || fail "the named core is not run: $(blas_line)"

step "the kernels change the losses only by rounding"
python3 - auto.jsonl keep.jsonl <<'PY' || fail "losses differ beyond rounding between kernel sets"
import json, sys
def losses(p): return [json.loads(l)["loss"] for l in open(p) if '"event":"train"' in l]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) == 6, (len(a), len(b))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print("largest relative loss difference:", worst)
assert worst < 1e-4
PY
