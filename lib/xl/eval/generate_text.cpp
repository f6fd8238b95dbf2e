#include "xl/eval/generate_text.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "xl/eval/evaluator.h"
#include "xl/model/model_io.h"
#include "xl/text/moses.h"
#include "xl/text/tokenizer.h"
#include "xl/util/error.h"
#include "xl/util/io.h"
#include "xl/util/log.h"
#include "xl/util/rng.h"

namespace xl::eval {
namespace {

// stdout, written through as each token is drawn; remembers whether the text ends a line.
class Out {
 public:
  void write(const std::string& text) {
    if (text.empty()) return;
    ends_line_ = text.back() == '\n';
    if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0)
      XL_FAIL(kExitIoErr, "cannot write to stdout");
  }
  bool ends_line() const { return ends_line_; }

 private:
  bool ends_line_ = true;  // the last byte written was a newline (or nothing was written)
};

// The token a prompt-less generation starts from: <eos> (a line start) when the vocab has one,
// else a newline character, else id 0.
int32_t start_token(const text::Vocab& vocab) {
  if (vocab.eos_id() >= 0) return vocab.eos_id();
  int32_t nl = vocab.find("\n");
  return nl >= 0 ? nl : 0;
}

}  // namespace

void generate_text(const TextGenerationRequest& r) {
  std::string prompt_text;
  std::string prompt_name = "--prompt";
  if (r.prompt) prompt_text = *r.prompt;
  if (r.prompt_file) {
    prompt_name = io::display_name(*r.prompt_file);
    prompt_text = io::read_text(*r.prompt_file);
  }
  auto [ckpt, model] = model::load_model(r.checkpoint);
  const text::Vocab vocab = std::move(ckpt.vocab);
  model->to(r.device);
  const auto pretokenizer = text::pretokenizer_for(vocab, r.pretokenize);
  text::Tokenizer tokenizer(vocab, r.allow_invalid_utf8, pretokenizer);
  GenerateSettings gs = r.settings;
  gs.cmem_len = r.cmem_len ? *r.cmem_len : trained_cmem_len(ckpt);
  if (r.no_unk) {
    gs.sampling.excluded = vocab.unk_id();
    if (vocab.unk_id() < 0)
      XL_WARN("--no-unk: " << io::display_name(r.checkpoint) << "'s vocab has no <unk>: nothing to leave out");
  }

  std::vector<int32_t> prompt = prompt_ids(tokenizer, vocab, prompt_text, prompt_name);
  const bool have_prompt = !prompt.empty();
  if (!have_prompt) prompt.push_back(start_token(vocab));
  const bool echo = r.echo && have_prompt;
  Out out;
  // Moses-tokenized words are detokenized line by line, a word's text written once it is final.
  std::optional<text::MosesLineWriter> moses;
  if (pretokenizer == text::Pretokenizer::kMoses) {
    moses.emplace();
    auto open = std::find(prompt.rbegin(), prompt.rend(), vocab.eos_id()).base();
    std::vector<std::string> open_words;
    for (auto it = open; it != prompt.end(); ++it) open_words.push_back(vocab.piece(*it));
    if (echo) out.write(tokenizer.decode(prompt.data(), static_cast<size_t>(open - prompt.begin())));
    out.write(moses->begin_line(std::move(open_words), echo));
  } else if (echo) {
    out.write(tokenizer.decode(prompt));
  }

  // Decoding is append-only, so each token's text is what it adds after the previous token.
  int32_t prev = prompt.back();
  bool first = true;
  Rng rng(r.seed);
  generate(model, prompt, gs, rng, [&](int32_t id) {
    if (moses) {
      out.write(id == vocab.eos_id() ? moses->end_line() : moses->add(vocab.piece(id)));
      return;
    }
    int32_t pair[2] = {prev, id};
    std::string text;
    if (first && !have_prompt) {
      text = tokenizer.decode(&id, 1);  // nothing was printed before: no separator
    } else {
      std::string both = tokenizer.decode(pair, 2), one = tokenizer.decode(pair, 1);
      text = both.substr(one.size());
    }
    first = false;
    prev = id;
    out.write(text);
  });
  if (moses) out.write(moses->rest());
  if (!out.ends_line()) out.write("\n");
}

}  // namespace xl::eval
