// Small-sample statistics for repeated runs: mean, sample standard deviation, and the 95%
// confidence interval of a mean from Student's t distribution (the right one for 3-10 seeds,
// where the normal approximation would understate the interval by up to 2.2x).
#pragma once
#include <vector>

namespace xl::stats {

double mean(const std::vector<double>& v);
// With n - 1 in the denominator; 0 for fewer than two values.
double sample_stddev(const std::vector<double>& v);
// The two-sided quantile t_{1 - alpha/2, df}: 12.706 for df 1, 2.776 for df 4, 2.042 for df 30.
double t_quantile(double p, int df);

struct MeanInterval {
  int n = 0;
  double mean = 0, sd = 0;
  double half_width = 0;  // mean +- half_width is the 95% interval; 0 for n < 2
};
MeanInterval mean_ci95(const std::vector<double>& v);

}  // namespace xl::stats
