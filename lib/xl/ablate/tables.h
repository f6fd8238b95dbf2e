// An ablation report as tables: one row per run (Markdown, TSV or JSON Lines), a pivot such as the
// paper's Table 10, and for grids with seeds the mean of each setting with its 95% confidence
// interval and the paired difference of each setting against the baseline, seed by seed. Also
// a gnuplot PNG of the validation curves.
#pragma once
#include <string>

#include "xl/ablate/run_report.h"

namespace xl::ablate {

std::string report_markdown(const AblationReport& report);
std::string report_tsv(const AblationReport& report);
std::string report_jsonl(const AblationReport& report);
// Validation curves of every run (step vs bpc/ppl) in one PNG; 69 without gnuplot, 73 when the
// PNG cannot be written.
void plot_validation(const AblationReport& report, const std::string& png);

}  // namespace xl::ablate
