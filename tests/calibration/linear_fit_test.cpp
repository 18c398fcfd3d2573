#include <catch2/catch.hpp>

#include "calibration/linear_fit.hpp"
#include "sim/engine/errors.hpp"

using fleetsim::fit_relative_least_squares;

TEST_CASE("exact linear data is fitted exactly, with no uncertainty") {
  // y = 2 + 3x at x = 1, 2, 4.
  const auto fit = fit_relative_least_squares({1, 2, 4}, {5, 8, 14});
  CHECK(fit.intercept == Approx(2));
  CHECK(fit.slope == Approx(3));
  CHECK(fit.intercept_sigma == Approx(0).margin(1e-9));
  CHECK(fit.slope_sigma == Approx(0).margin(1e-9));
}

TEST_CASE("noisy data: the relative-error weighted fit, worked by hand") {
  // x = 1, 2, 4; y = 5, 8, 15 (the last point 1 above y = 2 + 3x). Weights w = 1/y^2:
  //   S_w = 0.0544444, S_wx = 0.0890123, S_wxx = 0.1970123, S_wy = 0.3916667, S_wxy = 0.7166667
  //   D = S_w S_wxx - S_wx^2 = 0.00280297
  //   a = (S_wxx S_wy - S_wx S_wxy) / D = 1.675916,  b = (S_w S_wxy - S_wx S_wy) / D = 3.268590
  // Relative residuals (a + b x - y) / y = -0.011099, +0.026637, -0.016648; s^2 = their sum of
  // squares over 3 - 2 = 0.0011133; sigma_a = sqrt(s^2 S_wxx / D) = 0.27747,
  // sigma_b = sqrt(s^2 S_w / D) = 0.16321.
  const auto fit = fit_relative_least_squares({1, 2, 4}, {5, 8, 15});
  CHECK(fit.intercept == Approx(1.675916).epsilon(1e-5));
  CHECK(fit.slope == Approx(3.268590).epsilon(1e-5));
  CHECK(fit.intercept_sigma == Approx(0.27747).epsilon(1e-4));
  CHECK(fit.slope_sigma == Approx(0.16321).epsilon(1e-4));
  REQUIRE(fit.relative_errors.size() == 3);
  CHECK(fit.relative_errors[1] == Approx(0.026637).epsilon(1e-4));
}

TEST_CASE("a fit refuses what cannot be fitted") {
  CHECK_THROWS_AS(fit_relative_least_squares({1, 2}, {3, 4}), fleetsim::ModelError);  // 2 points
  CHECK_THROWS_AS(fit_relative_least_squares({1, 1, 1}, {3, 4, 5}), fleetsim::ModelError);
  CHECK_THROWS_AS(fit_relative_least_squares({1, 2, 3}, {3, 0, 5}), fleetsim::ModelError);
}
