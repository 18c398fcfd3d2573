// A DoRA step against LoRA's on the same job: the weight norms' memory traffic, every
// micro-batch, every layer.
#include <catch2/catch.hpp>

#include "common/small_job.hpp"
#include "sim/step/step_executor.hpp"

namespace fleetsim {

TEST_CASE("a DoRA step outlasts LoRA's by at least its weight norms' memory traffic") {
  // The small job (8 layers; q 2048, k and v 512, o 2048, gate and up 7168 wide; ZeRO-1 over
  // 8 GPUs, 2 micro-batches a rank) adapted on every linear layer. Each forward DoRA makes
  // W + s B A and its row norms: 8 bytes a projection weight read or written after the B A
  // GEMM writes 2, which no kernel moves faster than the GPU's HBM peak. The compute stream
  // grows by at least 2 micro-batches x 8 layers x 10 bytes x the layer's projection weights
  // / peak, and the model's FLOPs do not change.
  StepInputs lora = testing::small_job();
  lora.plan.zero_stage = 1;
  lora.training.lora = LoraSpec{};
  StepInputs dora = lora;
  dora.training.lora->weight_decomposed = true;
  const StepOutcome lora_step = simulate_step(lora);
  const StepOutcome dora_step = simulate_step(dora);
  REQUIRE(lora_step.simulated);
  REQUIRE(dora_step.simulated);
  const double h = 2048, kv = 512, f = 7168;
  const double weights = h * (h + kv + kv + h + f + f) + f * h;
  const double norms = 2 * 8 * 10 * weights / dora.gpu.hbm_bytes_per_s.value;
  CHECK(dora_step.step.breakdown.compute_s - lora_step.step.breakdown.compute_s >= norms);
  CHECK(dora_step.step.model_flops == Approx(lora_step.step.model_flops));
  CHECK(dora_step.step.step_time_s > lora_step.step.step_time_s);
}

}  // namespace fleetsim
