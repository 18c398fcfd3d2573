// Multi-token prediction (DeepSeek-V3's, as Megatron-Core trains it): each module after the
// last layer is a layer of the last one's kind, its embedding lookup, norms, concatenation and
// eh_proj, and one more prediction through the shared head.
#include <catch2/catch.hpp>

#include <string>
#include <variant>

#include "models.hpp"
#include "workloads/flop_conventions.hpp"
#include "workloads/layout/rules.hpp"
#include "workloads/precision.hpp"

namespace fleetsim {
namespace {

using testing::item_bytes;

// Llama 3 8B with `layers` layers and `modules` multi-token prediction modules.
ModelSpec llama_with(int layers, int modules) {
  ModelSpec m = testing::llama3_8b();
  m.layers = layers;
  m.mtp_layers = modules;
  return m;
}

// The nccl-tests sizes of every tensor-parallel collective of stage 0's program.
double tensor_bytes(const TaskGraph& graph) {
  double bytes = 0;
  for (const Task& task : graph.stages[0]) {
    const auto* work = std::get_if<CollectiveWork>(&task.work);
    if (work && work->group == GroupKind::tensor) bytes += work->size_bytes;
  }
  return bytes;
}

bool has_task(const TaskGraph& graph, const std::string& name) {
  for (const Program& program : graph.stages) {
    for (const Task& task : program) {
      if (task.name == name) return true;
    }
  }
  return false;
}

}  // namespace

TEST_CASE("a multi-token prediction module costs a layer, eh_proj and one more prediction") {
  // 4 layers with one module (C), against 4 layers (A) and 5 layers (B) without: the module is
  // one more layer of the same kind, plus eh_proj (T x hidden from 2 hidden: 2 T h 2h forward,
  // twice that backward, 12 T h^2) and one more logits GEMM (6 T h V); its lookup, norms and
  // concatenation are memory-bound kernels without FLOPs. Per micro-batch of T tokens on tp 2
  // ranks under sequence parallelism, its tensor-parallel traffic is the layer's plus, in
  // BF16 values of T tokens: the lookup's reduce-scatter (h), eh_proj's input gather (2h) and
  // its output's column gather (h) forward; the shard's gradient gathered (h), the input
  // re-gathered (2h), its gradient reduce-scattered (2h) and the lookup's gradient gathered
  // (h) backward; and the second prediction's head gather, re-gather and reduce-scatter (3h):
  // 13 h in all.
  const TrainingSpec t = testing::training(4096, 16, 1);
  ParallelPlan plan;
  plan.tp = 2;
  plan.dp = 4;
  plan.zero_stage = 1;
  const auto graph = [&](int layers, int modules) {
    return build_data_parallel_step(llama_with(layers, modules), t, plan);
  };
  const TaskGraph a = graph(4, 0), b = graph(5, 0), c = graph(4, 1);
  const double tokens = 4096.0;
  const double h = 4096, v = 128256;
  const double m = c.micro_batches;
  REQUIRE(m == 4);
  const double module_flops = (12 * tokens * h * h + 6 * tokens * h * v) / plan.tp;
  CHECK(c.hardware_flops_per_rank - a.hardware_flops_per_rank ==
        Approx(b.hardware_flops_per_rank - a.hardware_flops_per_rank + m * module_flops));
  CHECK(c.model_flops_per_rank - a.model_flops_per_rank ==
        Approx(b.model_flops_per_rank - a.model_flops_per_rank + m * module_flops));
  CHECK(tensor_bytes(c) - tensor_bytes(a) ==
        Approx(tensor_bytes(b) - tensor_bytes(a) + m * 13 * kBf16Bytes * tokens * h));
  // The module's units and ops by name: its eh_proj, and the head's second prediction.
  CHECK(has_task(c, "mb0.mtp1.eh_proj"));
  CHECK(has_task(c, "mb0.head.mtp1.logits"));
}

TEST_CASE("a multi-token prediction module weighs as a layer in the pipeline split") {
  // 32 layers and one module over 4 stages: 33 slots, 9 a stage less one on three of them from
  // the ends inwards (the first, the last, the second): 8, 8, 9, 8. The last stage holds 7
  // layers, the module and the head; every layer is held once.
  const ModelSpec m = llama_with(32, 1);
  CHECK(virtual_stage_layers(m, 4, 3).count() == 7);
  CHECK(virtual_stage_mtp_layers(m, 4, 3) == 1);
  CHECK(virtual_stage_mtp_layers(m, 4, 2) == 0);
  int layers = 0;
  for (int v = 0; v < 4; ++v) layers += virtual_stage_layers(m, 4, v).count();
  CHECK(layers == 32);
  CHECK(stage_layers(m, testing::pipeline(4, 1), 3) == 8);
  CHECK(stage_layers(m, testing::pipeline(4, 1), 2) == 9);
  // Units: the embedding, 32 layers, the module, the head.
  const std::vector<double> units = fsdp_unit_parameters(m);
  REQUIRE(units.size() == 35);
  CHECK(units[33] == mtp_module_parameters(m));
  const std::vector<std::size_t> last = virtual_stage_units(m, 4, 3);
  REQUIRE(last.size() == 9);
  CHECK(last.front() == 26);
  CHECK(last[7] == 33);
  CHECK(last.back() == 34);
}

TEST_CASE("under a pipeline the last stage keeps a copy of the embedding for the modules") {
  // Untied: without modules the stages hold the model once; with one, the last stage also
  // holds the embedding its module looks tokens up in, and the two copies' gradients are
  // exchanged as tied embeddings' are. On one stage there is no copy.
  const TrainingSpec t = testing::training(4096, 16, 1);
  const ParallelPlan two = testing::pipeline(2, 4);
  const auto held = [&](const ModelSpec& m, const ParallelPlan& plan) {
    double sum = 0;
    for (int stage = 0; stage < plan.pp; ++stage) sum += stage_parameters(m, plan, stage);
    return sum;
  };
  const ModelSpec plain = llama_with(8, 0), mtp = llama_with(8, 1);
  // Llama 3 8B's layer, 218,112,000, its eh_proj of 2 x 4,096 x 4,096 and three norms of 4,096.
  CHECK(mtp_module_parameters(mtp) == 251'678'720.0);
  CHECK(held(plain, two) == Approx(plain.parameters()));
  CHECK(held(mtp, two) == Approx(mtp.parameters() + embedding_parameters(mtp)));
  CHECK(held(mtp, testing::pipeline(1, 8)) == Approx(mtp.parameters()));
  CHECK(mtp.parameters() - plain.parameters() == mtp_module_parameters(mtp));
  CHECK_FALSE(has_task(build_data_parallel_step(plain, t, two), "embedding_grad.send"));
  CHECK(has_task(build_data_parallel_step(mtp, t, two), "embedding_grad.send"));
}

TEST_CASE("Megatron's FLOP count takes a module as a layer, its norms, eh_proj and logits") {
  // Megatron-LM's num_floating_point_operations with mtp_num_layers D: the layers' terms over
  // num_layers + D layers, 6 D (3 h + 2 h^2) for the modules' norms and eh_proj, and the
  // logits 6 V h (1 + D). So 32 layers and a module count as 33 layers and no module, plus
  // 6 (3 h + 2 h^2) + 6 V h; 6N counts the module's parameters.
  const double h = 4096, v = 128256;
  const ModelSpec with_module = llama_with(32, 1), longer = llama_with(33, 0);
  CHECK(flops_per_token(with_module, 8192, FlopConvention::megatron) ==
        Approx(flops_per_token(longer, 8192, FlopConvention::megatron) + 6 * (3 * h + 2 * h * h) +
               6 * v * h));
  CHECK(flops_per_token(with_module, 8192, FlopConvention::six_n) ==
        Approx(6 * (llama_with(32, 0).parameters() + 251'678'720.0)));
  // A mixture of experts' module visits k experts, as its last layer does.
  ModelSpec moe = with_module;
  moe.experts = 8;
  moe.experts_per_token = 2;
  ModelSpec moe_plain = moe;
  moe_plain.mtp_layers = 0;
  CHECK(active_parameters(moe) - active_parameters(moe_plain) ==
        Approx(mtp_module_parameters(moe) - 6 * mlp_parameters(moe)));
}

TEST_CASE("each multi-token prediction keeps its own logits for the loss's backward") {
  const TrainingSpec t = testing::training(4096, 16, 1);
  ParallelPlan plan;
  plan.dp = 8;
  plan.zero_stage = 1;
  const MemoryDevice device{192e9};
  const double without = item_bytes(estimate_memory(llama_with(8, 0), t, plan, device), "logits");
  CHECK(item_bytes(estimate_memory(llama_with(8, 2), t, plan, device), "logits") ==
        Approx(3 * without));
}

TEST_CASE("multi-token prediction is refused where it is not modelled") {
  const TrainingSpec t = testing::training(4096, 16, 1);
  const auto rules_broken = [&](const ModelSpec& m, const ParallelPlan& plan) {
    std::vector<std::string> names;
    for (const JobProblem& problem : job_problems(job_subject(m, t), plan)) {
      names.emplace_back(problem.rule);
    }
    return names;
  };
  using Catch::Matchers::VectorContains;
  // Two modules on 6 slots over 4 stages (1, 2, 2, 1): the last holds one slot, and Megatron-Core
  // runs every module on the last stage. Over 2 stages (3 and 3) they fit.
  const ModelSpec two_modules = llama_with(4, 2);
  CHECK_THAT(rules_broken(two_modules, testing::pipeline(4, 2)),
             VectorContains(std::string("mtp-on-last-stage")));
  CHECK(rules_broken(two_modules, testing::pipeline(2, 4)).empty());
  // ZeRO 3 would shard the embedding the modules look their tokens up in.
  ParallelPlan zero3;
  zero3.dp = 8;
  zero3.zero_stage = 3;
  CHECK_THAT(rules_broken(two_modules, zero3), VectorContains(std::string("mtp-as-modelled")));
  CHECK(rules_broken(llama_with(4, 0), zero3).empty());
  // LoRA would have to place adapters in the modules: reported at the method.
  JobSubject lora = job_subject(two_modules, t);
  lora.lora = true;
  const auto problem = first_job_problem(lora, testing::pipeline(2, 4));
  REQUIRE(problem);
  CHECK(problem->rule == "mtp-as-modelled");
  CHECK(problem->fields.front() == "training.method");
  // At most a module a layer: a count from nowhere is refused before anything is built.
  for (const int modules : {-1, 5, 2'000'000'000}) {
    const std::vector<JobProblem> problems = model_problems(llama_with(4, modules));
    REQUIRE(problems.size() == 1);
    CHECK(problems.front().rule == "mtp-layers-within-layers");
  }
  CHECK(model_problems(llama_with(4, 4)).empty());
}

}  // namespace fleetsim
