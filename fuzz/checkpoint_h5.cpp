// The checkpoint reader (xl-train-phase2 --init, xl-eval-longctx, xl-prune-heads, ...): any bytes
// are refused cleanly, or the checkpoint loads with every group, its model is built from the
// stored config and takes the stored tensors (copied, or read straight into it), and xl-inspect
// can describe and verify it.
#include "fuzz_support.h"
#include "xl/checkpoint/checkpoint.h"
#include "xl/h5/checksum.h"
#include "xl/h5/inspect.h"
#include "xl/model/model_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool one_thread = [] {  // one thread: libFuzzer measures one process
    torch::set_num_threads(1);
    return true;
  }();
  (void)one_thread;
  const std::string& path = xl::fuzz::input_file(data, size, ".h5");
  xl::fuzz::expect_clean_refusal([&] {
    const auto file = xl::h5::File::open(path, "an xl HDF5 file");
    (void)xl::h5::describe(file);
    (void)xl::h5::verify_checksums(file);
  });
  xl::fuzz::expect_clean_refusal([&] {
    const auto ckpt = xl::checkpoint::load(path);
    auto model = xl::model::model_from_checkpoint(ckpt, path);
    (void)xl::model::head_mask_of(ckpt);
  });
  xl::fuzz::expect_clean_refusal([&] {  // the tools' way: the weights read straight into the model
    const auto loaded = xl::model::load_model(path, {}, true);
    (void)xl::model::head_mask_of(loaded.ckpt);
  });
  return 0;
}
