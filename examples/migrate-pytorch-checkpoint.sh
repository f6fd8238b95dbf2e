#!/usr/bin/env bash
# Bringing a model trained with the PyTorch Transformer-XL (kimiyoung/transformer-xl) to xl.
#
# 1. In Python, next to that code, save the weights as a state_dict (the zip format):
#      model = torch.load("model.pt")                 # the pickled module its train.py saves
#      torch.save(model.state_dict(), "txl_state.pt")
# 2. Convert, giving the hyper-parameters it was trained with (here: enwik8 base) and the tokens
#    file whose vocab the model uses (byte level: xl-tokenize --mode byte):
set -euo pipefail
bin=${XL_BIN:-build/bin}
state=${1:?usage: $0 txl_state.pt tokens.h5}
tokens=${2:?usage: $0 txl_state.pt tokens.h5}
"$bin/xl-import-torch" --n-layer 12 --d-model 512 --n-head 8 --d-head 64 --d-inner 2048 \
  --tokens "$tokens" "$state" -o imported.h5
# 3. Evaluate with the paper's long contexts, or study its heads:
"$bin/xl-eval-longctx" --split test --tgt-len 128 --mem-len 640,1600,3800 --clamp-len 1000 imported.h5 "$tokens"
"$bin/xl-prune-heads" --mode ablate-one --split valid --max-tokens 50000 --format md imported.h5 "$tokens"
# 4. And back: an xl checkpoint as a state_dict the PyTorch code loads with load_state_dict().
"$bin/xl-import-torch" --export imported.h5 -o roundtrip_state.pt
