#!/usr/bin/env bash
# Bringing a model trained with the PyTorch Transformer-XL (kimiyoung/transformer-xl) to xl, with
# no Python: its data directory's corpus cache and the model.pt its train.py saved.
#   examples/migrate-pytorch-checkpoint.sh data/enwik8/cache.pt LM-TFM-enwik8/20190101-000000/model.pt
set -euo pipefail
bin=${XL_BIN:-build/bin}  # the built tools
cache=${1:?usage: $0 cache.pt model.pt}
model=${2:?usage: $0 cache.pt model.pt}
# 1. The cache's vocab and the ids of each split, as an xl tokens file (enwik8 and text8 become
#    byte and char vocabs in the reference's id order, so the tools report bpc).
"$bin/xl-import-torch" --corpus "$cache" -o txl-tokens.h5
# 2. The model: sizes, tying, pre_lnorm, same_length, clamp_len and dropouts come from model.pt;
#    flags given are checked against it.
"$bin/xl-import-torch" --vocab txl-tokens.h5 "$model" -o imported.h5
# 3. Evaluate with long memories, or study its heads:
"$bin/xl-eval-longctx" --split test --tgt-len 80 --mem-len 640,1600,2100 --clamp-len 820 imported.h5 txl-tokens.h5
"$bin/xl-prune-heads" --mode ablate-one --split valid --max-tokens 50000 --format md imported.h5 txl-tokens.h5
# 4. Fine-tune it in xl (fresh Adam moments, empty memories):
"$bin/xl-train-phase2" --init imported.h5 --lr 1e-4 --max-steps 200 txl-tokens.h5 -o tuned.h5
# 5. And back: an xl checkpoint as a state_dict the PyTorch code loads with load_state_dict().
"$bin/xl-import-torch" --export tuned.h5 -o tuned_state.pt
