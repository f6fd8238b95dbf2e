// xl-import-torch: a PyTorch Transformer-XL model or state_dict -> an xl checkpoint, and back with --export.
#include "xl/cli/tool_main.h"
#include "xl/compute/torch_process.h"
#include "xl/interop/torch_import.h"
#include "xl/options/import_torch_options.h"

int main(int argc, char** argv) {
  xl::compute::prepare_torch_process();
  return xl::cli::run_tool("xl-import-torch", argc, argv, [](int argc, char** argv) {
    xl::cli::Options cli(
        {"xl-import-torch", "Convert a PyTorch Transformer-XL model, state_dict or corpus cache into xl's files, or back.",
         "[OPTIONS] (--vocab FILE | --export | --corpus) INPUT -o OUTPUT",
         "Reads INPUT, a file written by torch.save(model.state_dict(), f) or torch.save(model, f) (train.py's\n"
         "model.pt) with the PyTorch Transformer-XL (kimiyoung/transformer-xl, pytorch/mem_transformer.py; the\n"
         "zip format of PyTorch 1.6 and later or the legacy one before it), without Python, and writes an xl\n"
         "checkpoint (phase \"imported\") with the vocab embedded. The vocab (--vocab: a TSV, what a tokens file\n"
         "or checkpoint embeds, Transformer-XL's cache.pt, or Hugging Face's vocab.bin or vocab.pkl, whose\n"
         "symbols its converter stored as UTF-8 read as Latin-1 and which are decoded) must list the model's\n"
         "symbols in its id order. The model flags are read off the tensor shapes where they can be (layers,\n"
         "widths, heads, clusters, tying); each one given is checked against the file, and a mismatch, an\n"
         "unknown or missing tensor, or a wrong shape stops with exit 65 naming it. A whole model also gives\n"
         "what the shapes cannot show (--pre-lnorm, --same-length, --clamp-len, --cutoffs of a div-val 1 model,\n"
         "dropouts); with a state_dict those must be given as the model was trained. Tied tensors, stored under\n"
         "both names by PyTorch, must be equal and are kept once. INPUT may also be a safetensors file (Hugging\n"
         "Face's format, which lists a tied tensor once), or a Hugging Face TransfoXL directory\n"
         "(save_pretrained's, or the hub's transfo-xl-wt103): its model.safetensors or pytorch_model.bin (or\n"
         "their shards, each tensor from the shard the index names) is read with what its config.json says\n"
         "(tie_projs, and tie_word_embeddings, true when absent as transformers takes it: a tensor the file lacks\n"
         "is then taken as tied only where they say so), and its vocab.bin or vocab.pkl serves when --vocab is\n"
         "not given.\n"
         "\n"
         "--corpus writes Transformer-XL's corpus cache INPUT (data_utils.py's cache.pt: its vocab and the ids\n"
         "of each split) as an xl tokens file, so that xl reads the very ids the PyTorch code trained on; its\n"
         "vocab then serves --vocab. The enwik8 and text8 caches, whose symbols are one character each, become\n"
         "a byte and a char vocab in the same id order (the tools report bpc, as Transformer-XL does). INPUT may\n"
         "also be Hugging Face's corpus.bin (the hub's transfo-xl-wt103 holds it: the ids, often NumPy arrays,\n"
         "without the vocab), or the directory holding it; its vocab is the vocab.bin or vocab.pkl beside it,\n"
         "or --vocab.\n"
         "\n"
         "--export writes the xl checkpoint INPUT as a state_dict that MemTransformerLM.load_state_dict() takes\n"
         "(tied tensors under both names; torch.load reads it with weights_only=True, PyTorch 2.6's default) and\n"
         "prints the matching flags and constructor call. Per-layer u, v biases (untie_r, or pruned heads) need\n"
         "--untie-r true (a target with per-layer biases) unless all layers hold the same ones; layers with\n"
         "different head counts cannot be exported (exit 65).",
         "  xl-import-torch --corpus data/enwik8/cache.pt -o enwik8-txl.h5\n"
         "  xl-import-torch --vocab enwik8-txl.h5 LM-TFM-enwik8/model.pt -o enwik8-base.h5\n"
         "  xl-import-torch --vocab enwik8-txl.h5 --same-length true --clamp-len 820 enwik8-base-sd.pt -o enwik8-base.h5\n"
         "  xl-import-torch --corpus data/wikitext-103/cache.pt -o wt103.h5\n"
         "  xl-import-torch --vocab wt103.h5 --cutoffs 20000,40000,200000 wt103-base-sd.pt -o wt103-base.h5\n"
         "  xl-import-torch transfo-xl-wt103/ -o wt103-hf.h5\n"
         "  xl-import-torch --corpus transfo-xl-wt103/ -o wt103-hf-corpus.h5\n"
         "  xl-import-torch --vocab v.tsv --key model_state nvidia-checkpoint.pt -o model.h5\n"
         "  xl-import-torch --export --untie-r true pruned.h5 -o pruned.pt"});
    xl::options::add_import_torch_options(cli);
    if (!cli.parse(argc, argv)) return 0;
    xl::interop::run_torch_import(xl::options::torch_import_request(cli, argc, argv));
    return 0;
  });
}
