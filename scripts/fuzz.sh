#!/usr/bin/env bash
# Coverage-guided fuzzing of every reader of outside input (fuzz/): builds the libFuzzer targets
# with clang under AddressSanitizer and UndefinedBehaviorSanitizer in build-fuzz/, seeds each with
# real files made by the built tools (build/bin), runs each for SECONDS and prints one JSON line
# per target (executions, corpus size, findings). A finding stops with the target's exit status,
# its input saved as build-fuzz/findings/<target>/crash-*.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (default 60 s each, every target)
#
# TARGET: vocab_tsv tokens_h5 config_ini char_text moses_text (the xl_core readers; built in ~3 min), and
# checkpoint_h5 torch_pickle grid_ini (the LibTorch layer's readers: the whole library is built
# with clang and the sanitizers first, ~25 min on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(vocab_tsv tokens_h5 config_ini char_text moses_text checkpoint_h5 torch_pickle grid_ini)

if ! command -v clang++ >/dev/null || ! ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
  echo "fuzz.sh: installing clang and its fuzzer runtime" >&2
  sudo=""; [ "$(id -u)" = 0 ] || sudo=sudo
  $sudo apt-get install -y -q --no-install-recommends clang libclang-rt-14-dev >/dev/null
fi
[ -x build/bin/xl-tokenize ] || scripts/build.sh

cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DXL_FUZZ=ON -DXL_BUILD_TESTS=OFF \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fsanitize=fuzzer-no-link -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DCMAKE_C_FLAGS="-fsanitize=address,undefined -fno-omit-frame-pointer" >/dev/null
ninja -C build-fuzz "${targets[@]/#/fuzz_}" >&2

# Seeds: real files of each format, made the way users make them.
seeds=build-fuzz/seeds
work=$(mktemp -d "${TMPDIR:-/tmp}/xl-fuzz-seeds.XXXXXX")
trap 'rm -rf "$work"' EXIT
text="$root/../shared/data/tinyshakespeare/input.txt"
[ -f "$text" ] || text="$root/README.md"
head -c 20000 "$text" >"$work/text"
mkdir -p "$seeds"/{vocab_tsv,tokens_h5,config_ini,char_text,moses_text,checkpoint_h5,torch_pickle,grid_ini}
B=build/bin
for mode in byte char word; do
  $B/xl-build-vocab -q --mode $mode "$work/text" -o "$seeds/vocab_tsv/$mode.tsv" -f
  $B/xl-tokenize -q --mode $mode --split 0.8,0.1,0.1 "$work/text" -o "$seeds/tokens_h5/$mode.h5" -f
done
# Moses words: the vocab and tokens file record their pretokenizer.
$B/xl-build-vocab -q --mode word --pretokenize moses "$work/text" -o "$seeds/vocab_tsv/moses.tsv" -f
$B/xl-tokenize -q --mode word --pretokenize moses --split 0.8,0.1,0.1 "$work/text" -o "$seeds/tokens_h5/moses.h5" -f
cp share/xl/configs/*.ini "$seeds/config_ini/"
printf "# the keys the target declares\nn-layer = 4\nlr = 0.1  # a comment\nsame-length = true\n\n[ignored]\nskip-schedule = linear\ncutoffs = 1,2\n" >"$seeds/config_ini/declared.ini"
head -c 4000 "$work/text" >"$seeds/char_text/english.txt"
cp "$seeds/char_text/english.txt" "$seeds/moses_text/"
# Checkpoints of small models (each group the loader reads: model, optimizer, generators,
# memories, analysis; an adaptive softmax; a pruned one with per-layer heads; one with head scores), their
# torch.save exports, and the grids that ship.
small="--n-layer 2 --d-model 16 --n-head 2 --d-head 8 --d-inner 32 --tgt-len 8 --mem-len 8 --batch-size 2 --eval-interval 0 --threads 1 -q"
$B/xl-tokenize -q --mode byte --split 0.8,0.1,0.1 "$work/text" -o "$work/byte.h5" -f
$B/xl-train-phase1 $small --max-steps 2 "$work/byte.h5" -o "$seeds/checkpoint_h5/p1.h5" -f
$B/xl-train-phase1 $small --max-steps 2 --cutoffs 40,80 --div-val 2 "$work/byte.h5" -o "$seeds/checkpoint_h5/adaptive.h5" -f
prune="$B/xl-prune-heads -q --threads 1 --tgt-len 8 --batch-size 2 --max-tokens 200 --importance-max-tokens 200"
$prune --mode iterative --prune-heads 1 "$seeds/checkpoint_h5/p1.h5" "$work/byte.h5" -o "$seeds/checkpoint_h5/pruned.h5" -f >/dev/null
$prune --mode importance "$seeds/checkpoint_h5/p1.h5" "$work/byte.h5" -o "$seeds/checkpoint_h5/scored.h5" -f >/dev/null
for c in p1 adaptive; do
  $B/xl-import-torch -q --export "$seeds/checkpoint_h5/$c.h5" -o "$seeds/torch_pickle/$c.pt" -f >/dev/null 2>&1
done
# A whole pickled model (torch.save(model, f), as train.py writes model.pt), also in the format
# before PyTorch 1.6, a corpus cache (data_utils.py's cache.pt), Hugging Face's vocab.bin,
# vocab.pkl and corpus.bin, and a state_dict as save_pretrained's model.safetensors, where PyTorch is found.
for py in python3 /usr/bin/python3; do
  "$py" -c 'import torch' 2>/dev/null || continue
  echo '{"n_token": 256, "n_layer": 2, "d_model": 16, "n_head": 2, "d_head": 8, "d_inner": 32, "tgt_len": 8, "mem_len": 8}' >"$work/p1.json"
  "$py" tests/cli/txl_sd.py module "$work/p1.json" "$seeds/torch_pickle/p1.pt" "$seeds/torch_pickle/p1-model.pt"
  "$py" tests/cli/txl_sd.py corpus "$work/text" "$seeds/torch_pickle/cache.pt"
  "$py" tests/cli/txl_sd.py module "$work/p1.json" "$seeds/torch_pickle/p1.pt" "$seeds/torch_pickle/p1-legacy.pt" --legacy
  "$py" tests/cli/txl_sd.py hf-vocab "$seeds/torch_pickle/cache.pt" "$seeds/torch_pickle/vocab.bin"
  "$py" tests/cli/txl_sd.py hf-vocab "$seeds/torch_pickle/cache.pt" "$seeds/torch_pickle/vocab.pkl" --pickle
  "$py" tests/cli/txl_sd.py hf-corpus "$seeds/torch_pickle/cache.pt" "$seeds/torch_pickle/corpus.bin"
  "$py" tests/cli/txl_sd.py hf-corpus "$seeds/torch_pickle/cache.pt" "$seeds/torch_pickle/corpus-zip.bin" --zip
  "$py" tests/cli/txl_sd.py safetensors "$seeds/torch_pickle/adaptive.pt" "$seeds/torch_pickle/adaptive.safetensors"
  break
done
cp share/xl/grids/*.ini "$seeds/grid_ini/"
# Inputs that once crashed a target (tests/fuzz-regressions/TARGET-WHAT.gz) seed it again.
for f in tests/fuzz-regressions/*.gz; do
  [ -e "$f" ] || continue
  t=$(basename "$f"); gunzip -c "$f" >"$seeds/${t%%-*}/${t%.gz}"
done
printf 'na\xc3\xafve caf\xc3\xa9 \xe2\x82\xac10 \xf0\x9f\x98\x80\n' >"$seeds/char_text/utf8.txt"
printf 'Hello (bracket) and side-scrolled [and] Henry'"'"'s $5,000 with 3.34 m. What'"'"'s up!?\n\xe2\x80\x9cMr. Smith\xe2\x80\x9d said\xc2\xa0: <unk> e.g. 1\xc2\xa0000...\n' >"$seeds/moses_text/raw.txt"

status=0
for t in "${targets[@]}"; do
  corpus=build-fuzz/corpus/$t findings=build-fuzz/findings/$t
  mkdir -p "$corpus" "$findings"
  echo "fuzz.sh: $t for ${seconds}s" >&2
  log=build-fuzz/$t.log
  rc=0
  TMPDIR=$work ASAN_OPTIONS=detect_leaks=0 "build-fuzz/fuzz/fuzz_$t" -max_total_time="$seconds" -print_final_stats=1 \
    -rss_limit_mb=4096 -malloc_limit_mb=2048 -timeout=20 \
    -artifact_prefix="$findings/" "$corpus" "$seeds/$t" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | awk '{s += $1} END {print s + 0}')
  printf '{"target": "%s", "seconds": %s, "executions": %s, "corpus": %s, "exit": %s, "findings": %s}\n' \
    "$t" "$seconds" "$execs" "$(ls "$corpus" | wc -l)" "$rc" "$(ls "$findings" | wc -l)"
  if [ "$rc" -ne 0 ]; then
    grep -m5 -E "FINDING|ERROR: |SUMMARY|==[0-9]+==" "$log" >&2 || tail -20 "$log" >&2
    status=$rc
  fi
done
exit "$status"
