// xl-import-torch's run, in its three directions: a PyTorch Transformer-XL model or state_dict
// (torch.save, safetensors, or a Hugging Face TransfoXL directory) into an xl checkpoint; a corpus
// cache (Transformer-XL's cache.pt, Hugging Face's corpus.bin) into a tokens file; and an xl
// checkpoint back into a state_dict that MemTransformerLM.load_state_dict() takes.
#pragma once
#include <string>

#include "xl/interop/txl_state_dict.h"

namespace xl::interop {

enum class ImportDirection { kModel, kCorpus, kExport };

// Checked settings (options/import_torch_options.h builds them from the flags).
struct TorchImportRequest {
  ImportDirection direction = ImportDirection::kModel;
  std::string input = "-";
  std::string vocab;          // --vocab FILE, or empty
  std::string key, prefix;    // --key, --prefix, or empty
  TorchHyperParams params;    // the model flags given (kModel)
  bool untie_r = false;       // kExport: the target has per-layer biases
  std::string output = "-";
  bool force = false;
  std::string command_line;   // recorded in what is written
  bool verify_crc = true;     // check the zip archives' CRC-32s (--no-verify-crc: not)
};

void run_torch_import(const TorchImportRequest& request);

}  // namespace xl::interop
