#include "xl/eval/metric.h"

#include <cmath>

namespace xl::eval {

double Metric::of(double nats) const { return ppl_ ? std::exp(nats) : nats / std::log(2.0); }

}  // namespace xl::eval
