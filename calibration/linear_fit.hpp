// Fitting a latency-bandwidth model to measured times: y = a + b x by least squares on relative
// errors (weights 1 / y^2), so that a 10 us row and a 100 ms row count alike, as a log's rows do
// for a user comparing busbw.
//
// For a collective, x is the time the simulator predicts at efficiency 1 and zero latency, y the
// measured time: a is the latency the model lacks, 1 / b the efficiency of the bottleneck.
#pragma once

#include <functional>
#include <vector>

namespace fleetsim {

struct LinearFit {
  double intercept = 0;  // a
  double slope = 0;      // b
  double intercept_sigma = 0;
  double slope_sigma = 0;
  std::vector<double> relative_errors;  // (a + b x_i - y_i) / y_i, per point
};

// Precondition: x and y of the same size >= 3, y > 0. Throws ModelError otherwise, or when the
// x values do not vary (nothing separates latency from bandwidth).
LinearFit fit_relative_least_squares(const std::vector<double>& x, const std::vector<double>& y);

// The x in [low, high] where f is least (Brent's method to about 1e-8 relative), for the
// one-dimensional searches of the kernel fits.
double minimise(const std::function<double(double)>& f, double low, double high);

// The median of a non-empty list (the mean of the middle two for an even count).
double median(std::vector<double> values);

}  // namespace fleetsim
