// Fitting a profile's attention entries (AttentionPass, per implementation and pass) to attention
// microbenchmark rows: step 3 of fit_kernels (kernel_fit.hpp).
//
// A row runs one pass (fwd, bwd) or both (fwd_bwd: the forward kernel then the backward one),
// under a causal mask or not, at one sequence length. Per pass, the rows fit what they can tell:
// the efficiency where the pass has rows of its own, the full-mask overhead where those rows
// span two or more sequence lengths, the causal one likewise; fwd_bwd rows alone scale both
// passes' efficiencies by one factor and keep their ratio. What the rows cannot tell keeps the
// starting profile's value. The entries are rates at a short run's boost clocks: a row of a file
// marked `# load: sustained` is timed at the profile's sustained_clock of them, any other at
// the entries themselves. The fit minimises the squared relative error of the times by
// coordinate descent (Brent's method on each parameter in turn, to a fixed point); a fitted
// parameter's sigma is the residual variance over the curvature of that error in it, or 5% of
// its value (the profile's sigma if larger) where the rows leave no degree of freedom.
#pragma once

#include <utility>
#include <vector>

#include "calibration/kernel_fit.hpp"

namespace fleetsim {

using AttentionRows = std::vector<std::pair<const AttentionSample*, const MicrobenchFile*>>;

// Fits fit.profile's entries of `kernel` to `rows` (all of that implementation, BF16), adding
// parameters and points to `fit`; `start` is the profile the fit began from.
void fit_attention(KernelFit& fit, const GpuProfile& start, AttentionKernel kernel,
                   const AttentionRows& rows);

}  // namespace fleetsim
