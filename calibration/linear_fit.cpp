#include "calibration/linear_fit.hpp"

#include <algorithm>

#include <cmath>

#include <boost/math/tools/minima.hpp>
#include <limits>

#include "sim/engine/errors.hpp"

namespace fleetsim {

LinearFit fit_relative_least_squares(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size() || x.size() < 3) {
    // Two points fit exactly and leave no residual to estimate an uncertainty from.
    throw ModelError("a fit needs at least three points with x and y each");
  }
  // Weighted normal equations for y = a + b x with w = 1 / y^2:
  //   [S_w   S_wx ] [a]   [S_wy ]
  //   [S_wx  S_wxx] [b] = [S_wxy]
  double sw = 0, swx = 0, swxx = 0, swy = 0, swxy = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!(y[i] > 0)) throw ModelError("a measured time must be positive");
    const double w = 1 / (y[i] * y[i]);
    sw += w;
    swx += w * x[i];
    swxx += w * x[i] * x[i];
    swy += w * y[i];
    swxy += w * x[i] * y[i];
  }
  const double determinant = sw * swxx - swx * swx;
  if (!(std::abs(determinant) > 1e-12 * sw * swxx)) {
    throw ModelError("the sizes do not vary enough to separate latency from bandwidth");
  }
  LinearFit fit;
  fit.intercept = (swxx * swy - swx * swxy) / determinant;
  fit.slope = (sw * swxy - swx * swy) / determinant;
  double weighted_residuals = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double error = (fit.intercept + fit.slope * x[i] - y[i]) / y[i];
    fit.relative_errors.push_back(error);
    weighted_residuals += error * error;
  }
  // Parameter covariance s^2 (X^T W X)^-1, with s^2 the weighted residual variance.
  const double s2 = weighted_residuals / (static_cast<double>(x.size()) - 2);
  fit.intercept_sigma = std::sqrt(s2 * swxx / determinant);
  fit.slope_sigma = std::sqrt(s2 * sw / determinant);
  return fit;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double minimise(const std::function<double(double)>& f, double low, double high) {
  // Bits of precision: as many as a double allows Brent's method (about 1e-8 relative).
  constexpr int kBrentBits = std::numeric_limits<double>::digits / 2;
  std::uintmax_t iterations = 200;
  return boost::math::tools::brent_find_minima(f, low, high, kBrentBits, iterations).first;
}

}  // namespace fleetsim
