#include <catch2/catch.hpp>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "workloads/layout/rules.hpp"

using namespace fleetsim;

namespace {

// Llama-3-8B's dimensions, a batch of 256 sequences of 4,096 tokens in micro-batches of 2.
JobSubject llama3_8b() {
  JobSubject job;
  job.model = "llama3-8b";
  job.layers = 32;
  job.heads = 32;
  job.kv_heads = 8;
  job.ffn = 14336;
  job.vocab = 128256;
  job.seq_len = 4096;
  job.global_batch = 256;
  job.micro_batch = 2;
  return job;
}

// Two 8-GPU nodes without a described host; tp 8 x dp 2 uses them all.
const NodeSpec kNode = [] {
  NodeSpec node;
  node.name = "eight-gpus";
  node.gpus = 8;
  return node;
}();

JobSubject on_two_nodes(JobSubject job) {
  job.cluster = JobCluster{&kNode, 2, "h100-sxm", true};
  return job;
}

ParallelPlan tp8_dp2() {
  ParallelPlan plan;
  plan.tp = 8;
  plan.dp = 2;
  return plan;
}

struct Case {
  const char* rule;   // the first rule broken
  const char* field;  // where it is reported first
  std::function<void(JobSubject&, ParallelPlan&)> change;
};

}  // namespace

TEST_CASE("a job that keeps every rule has no problem") {
  CHECK(job_problems(on_two_nodes(llama3_8b()), tp8_dp2()).empty());
  CHECK(job_problems(llama3_8b(), tp8_dp2()).empty());
}

TEST_CASE("Ulysses runs local attention, which ring attention refuses, and cp with ep") {
  // tp 4 x cp 2 divides the 8 KV heads: each Ulysses rank sees whole sequences of its heads.
  JobSubject job = llama3_8b();
  job.local_attention = true;
  ParallelPlan plan = tp8_dp2();
  plan.tp = 4;
  plan.cp = 2;
  const std::vector<JobProblem> ring = job_problems(job, plan);
  REQUIRE(ring.size() == 1);
  CHECK(ring.front().rule == "cp-without-local-attention");
  plan.cp_comm_type = ContextComm::a2a;
  CHECK(job_problems(job, plan).empty());
  // Experts over ep 4 consecutive replicas of dp 2 x cp 2.
  job.experts = 8;
  job.experts_per_token = 2;
  plan.tp = 1;
  plan.dp = 16;
  plan.ep = 4;
  plan.zero_stage = 1;
  CHECK(job_problems(job, plan).empty());
}

TEST_CASE("without sequence parallelism tp need not divide the sequence, nor 2 x cp x tp") {
  // 4100 tokens over tp 8: no shard to cut without sequence parallelism; with cp 2 only the
  // 2 x cp = 4 chunks must divide 4100.
  JobSubject job = llama3_8b();
  job.seq_len = 4100;
  ParallelPlan plan = tp8_dp2();
  plan.sequence_parallel = false;
  CHECK(job_problems(job, plan).empty());
  plan.cp = 2;
  plan.dp = 1;
  CHECK(job_problems(job, plan).empty());
  plan.sequence_parallel = true;
  CHECK_FALSE(job_problems(job, plan).empty());
}

TEST_CASE("each rule, broken alone, is the problem reported, at the field to change") {
  const std::vector<Case> cases = {
      {"automatic-dp-divides", "layout.dp",
       [](JobSubject&, ParallelPlan& p) {
         p.tp = 1;
         p.pp = 3;  // 3 does not divide 16 GPUs
         p.dp = 0;
       }},
      {"positive-sizes", "layout", [](JobSubject&, ParallelPlan& p) { p.vpp = 0; }},
      {"zero-stage", "layout.zero", [](JobSubject&, ParallelPlan& p) { p.zero_stage = 4; }},
      {"tp-in-nvlink-domain", "layout.tp",
       [](JobSubject&, ParallelPlan& p) {
         p.tp = 16;  // two nodes' worth, in an NVLink domain of one
         p.dp = 1;
       }},
      {"tp-divides-model", "layout.tp",
       [](JobSubject& j, ParallelPlan&) { j.kv_heads = 4; }},  // 8 KV heads' groups of 4
      {"tp-divides-sequence", "layout.tp", [](JobSubject& j, ParallelPlan&) { j.seq_len = 4100; }},
      {"tp-comm-overlap-needs-tp", "layout.tp_comm_overlap",
       [](JobSubject&, ParallelPlan& p) {
         p.tp = 1;
         p.dp = 16;
         p.tp_comm_overlap = true;
       }},
      {"moe-tp-needs-sequence-parallel", "layout.sequence_parallel",
       [](JobSubject& j, ParallelPlan& p) {
         j.experts = 8;
         p.sequence_parallel = false;
       }},
      {"latent-attention-tp-needs-sequence-parallel", "layout.sequence_parallel",
       [](JobSubject& j, ParallelPlan& p) {
         j.latent_attention = true;
         p.sequence_parallel = false;
       }},
      {"sequence-parallel-off-needs-tp", "layout.sequence_parallel",
       [](JobSubject&, ParallelPlan& p) {
         p.tp = 1;
         p.dp = 16;
         p.sequence_parallel = false;
       }},
      {"grad-reduce-after-backward-needs-zero-0-1", "layout.overlap_grad_reduce",
       [](JobSubject&, ParallelPlan& p) {
         p.overlap_grad_reduce = false;
         p.zero_stage = 2;
       }},
      {"fp16-at-bf16-rate", "training.precision",
       [](JobSubject& j, ParallelPlan&) {
         j.fp16 = true;
         j.cluster->gpu_fp16_at_bf16_rate = false;
       }},
      {"param-gather-overlap-needs-zero-1-2", "layout.overlap_param_gather",
       [](JobSubject&, ParallelPlan& p) { p.overlap_param_gather = true; }},
      {"param-gather-overlap-needs-grad-overlap", "layout.overlap_param_gather",
       [](JobSubject&, ParallelPlan& p) {
         p.zero_stage = 1;
         p.overlap_param_gather = true;
         p.overlap_grad_reduce = false;
       }},
      {"fsdp2-needs-zero-3", "layout.fsdp2",
       [](JobSubject&, ParallelPlan& p) {
         p.fsdp2 = true;
         p.zero_stage = 2;
       }},
      {"offload-needs-zero", "layout.offload_optimizer",
       [](JobSubject&, ParallelPlan& p) { p.offload_optimizer = true; }},
      {"offload-needs-fp32-adam", "layout.offload_optimizer",
       [](JobSubject& j, ParallelPlan& p) {
         p.offload_optimizer = true;
         p.zero_stage = 1;
         j.fp32_adam = false;
       }},
      {"offload-needs-host", "layout.offload_optimizer",
       [](JobSubject&, ParallelPlan& p) {
         p.offload_optimizer = true;
         p.zero_stage = 1;
       }},
      {"activation-offload-within-layers", "layout.activation_offload_layers",
       [](JobSubject&, ParallelPlan& p) { p.activation_offload_layers = 32; }},
      {"activation-offload-as-megatron-runs-it", "layout.activation_offload_layers",
       [](JobSubject&, ParallelPlan& p) {
         p.activation_offload_layers = 4;
         p.pp = 2;
         p.dp = 1;
       }},
      {"activation-offload-needs-host", "layout.activation_offload_layers",
       [](JobSubject&, ParallelPlan& p) { p.activation_offload_layers = 4; }},
      {"ep-needs-experts", "layout.ep", [](JobSubject&, ParallelPlan& p) { p.ep = 2; }},
      {"ep-divides-experts-and-dp", "layout.ep",
       [](JobSubject& j, ParallelPlan& p) {
         j.experts = 8;
         p.tp = 1;
         p.dp = 16;
         p.ep = 16;  // more than the 8 experts
       }},
      {"ep-as-modelled", "layout.ep",
       [](JobSubject& j, ParallelPlan& p) {
         j.experts = 8;
         j.allgather_dispatcher = true;
         p.ep = 2;
       }},
      {"ep-as-modelled", "layout.ep",
       [](JobSubject& j, ParallelPlan& p) {
         j.experts = 8;
         p.ep = 2;
         p.zero_stage = 1;
         p.offload_optimizer = true;
         j.cluster.reset();  // no node whose host to check
       }},
      {"expert-tp-as-modelled", "layout.expert_tp",
       [](JobSubject& j, ParallelPlan& p) {
         j.experts = 8;
         p.ep = 2;
         p.expert_tp = 2;  // neither tp 8 nor 1
       }},
      {"ep-divides-experts-and-dp", "layout.ep",
       [](JobSubject& j, ParallelPlan& p) {
         j.experts = 24;
         p.ep = 12;  // divides the experts, not the stage's 16 ranks
         p.expert_tp = 1;
       }},
      {"expert-tp-as-modelled", "layout.expert_tp",
       [](JobSubject& j, ParallelPlan& p) {
         j.experts = 8;
         p.expert_tp = 1;  // with ep 1
       }},
      {"expert-tp-as-modelled", "layout.expert_tp",
       [](JobSubject& j, ParallelPlan& p) {
         j.experts = 8;
         p.ep = 8;
         p.expert_tp = 1;
         p.zero_stage = 3;
       }},
      {"cp-divides-sequence", "layout.cp",
       [](JobSubject&, ParallelPlan& p) {
         p.tp = 2;
         p.cp = 3;  // 2 x cp x tp = 12 does not divide 4096
         p.dp = 2;
       }},
      {"cp-needs-flash-attention", "layout.cp",
       [](JobSubject& j, ParallelPlan& p) {
         j.flash_attention = false;
         p.cp = 2;
         p.dp = 1;
       }},
      {"expert-load-within-group", "training.expert_load_imbalance",
       [](JobSubject& j, ParallelPlan& p) {
         j.experts = 8;
         j.experts_per_token = 2;
         j.expert_load = 2.5;  // the busiest of 2 ranks gets at most twice the mean
         p.tp = 1;
         p.dp = 16;
         p.ep = 2;
       }},
      {"cp-without-local-attention", "layout.cp",
       [](JobSubject& j, ParallelPlan& p) {
         j.local_attention = true;
         p.cp = 2;
         p.dp = 1;
       }},
      {"cp-a2a-splits-heads", "layout.cp_comm_type",
       [](JobSubject&, ParallelPlan& p) {
         p.cp = 2;  // tp 8 x cp 2 = 16 does not divide the 8 KV heads
         p.dp = 1;
         p.cp_comm_type = ContextComm::a2a;
       }},
      {"vpp-needs-1f1b-pipeline", "layout.vpp", [](JobSubject&, ParallelPlan& p) { p.vpp = 2; }},
      {"virtual-stages-within-layers", "layout.vpp",
       [](JobSubject&, ParallelPlan& p) {
         p.tp = 4;
         p.pp = 4;
         p.dp = 1;
         p.vpp = 16;  // 64 virtual stages of 32 layers
       }},
      {"stages-within-layers", "layout.pp",
       [](JobSubject& j, ParallelPlan& p) {
         j.layers = 1;
         p.tp = 8;
         p.pp = 2;
         p.dp = 1;
       }},
      {"pipeline-keeps-parameters", "layout.zero",
       [](JobSubject&, ParallelPlan& p) {
         p.pp = 2;
         p.dp = 1;
         p.zero_stage = 3;  // without fsdp2
       }},
      {"uses-every-gpu", "layout.dp", [](JobSubject&, ParallelPlan& p) { p.dp = 4; }},
      {"batch-splits-into-micro-batches", "training.global_batch",
       [](JobSubject& j, ParallelPlan&) { j.global_batch = 250; }},
      {"replay-within-bounds", "training.global_batch",
       [](JobSubject& j, ParallelPlan& p) {
         // 2^19 micro-batches a rank through 32 layers: 2^24 passes, 64 times the most.
         j.micro_batch = 1;
         j.global_batch = (1 << 19) * p.dp;
       }},
      {"micro-batch-group-needs-interleaving", "layout.microbatch_group",
       [](JobSubject&, ParallelPlan& p) { p.microbatch_group = 2; }},
      {"micro-batch-group-within-pp-and-batch", "layout.microbatch_group",
       [](JobSubject&, ParallelPlan& p) {
         p.tp = 4;
         p.pp = 2;
         p.dp = 2;
         p.vpp = 2;
         p.microbatch_group = 1;  // fewer than pp
       }},
      {"interleaving-in-micro-batch-groups", "layout.vpp",
       [](JobSubject& j, ParallelPlan& p) {
         p.tp = 4;
         p.pp = 2;
         p.dp = 2;
         p.vpp = 2;
         j.global_batch = 12;  // 3 micro-batches of 2 on each of 2 replicas: not groups of 2
       }},
      {"bf16-shards-need-zero-3", "layout.bf16_shards",
       [](JobSubject&, ParallelPlan& p) { p.bf16_shards = true; }},
      {"recompute-layers-need-full", "layout.recompute_layers",
       [](JobSubject&, ParallelPlan& p) { p.recompute_layers = 2; }},
      {"recompute-modules-need-selective", "layout.recompute_modules",
       [](JobSubject&, ParallelPlan& p) { p.recompute_modules.mlp = true; }},
      {"recompute-modules-fit-the-model", "layout.recompute_modules",
       [](JobSubject&, ParallelPlan& p) {
         p.recompute = Recompute::selective;
         p.recompute_modules.moe_act = true;  // on a dense model
       }},
      {"lora-on-dense-model", "training.method",
       [](JobSubject& j, ParallelPlan&) {
         j.lora = true;
         j.experts = 8;
       }},
      {"mtp-as-modelled", "layout.zero",
       [](JobSubject& j, ParallelPlan& p) {
         j.mtp_layers = 1;
         p.zero_stage = 3;
       }},
      {"mtp-on-last-stage", "layout.pp",
       [](JobSubject& j, ParallelPlan& p) {
         // 6 layers and 4 modules over 4 stages: 2, 3, 3 and 2 slots, 2 on the last.
         j.layers = 6;
         j.mtp_layers = 4;
         p.tp = 4;
         p.pp = 4;
         p.dp = 1;
       }},
      {"per-op-recompute-on-dense-full-model", "layout.recompute",
       [](JobSubject& j, ParallelPlan& p) {
         j.experts = 8;
         p.recompute = Recompute::per_op;
       }},
      {"fp8-needs-fp8-gpu", "training.precision",
       [](JobSubject& j, ParallelPlan&) {
         j.fp8 = true;
         j.cluster->gpu_fp8 = false;
       }},
      {"fp8-without-quantized-base", "training.precision",
       [](JobSubject& j, ParallelPlan& p) {
         j.fp8 = j.lora = j.quantized_base = true;
         p.tp = 1;
         p.dp = 16;
       }},
      {"shared-expert-overlap-as-modelled", "training.shared_expert_overlap",
       [](JobSubject& j, ParallelPlan&) { j.shared_expert_overlap = true; }},
      {"ep-comm-overlap-as-megatron-runs-it", "layout.ep_comm_overlap",
       [](JobSubject& j, ParallelPlan& p) {
         j.experts = 8;
         p.ep_comm_overlap = true;  // with ep 1
       }},
      {"ep-comm-overlap-as-megatron-runs-it", "layout.ep_comm_overlap",
       [](JobSubject& j, ParallelPlan& p) {
         j.experts = 8;
         p.ep = 2;
         p.zero_stage = 1;
         p.recompute = Recompute::full;
         p.ep_comm_overlap = true;
       }},
      {"dora-dropout-without-tp", "training.lora.dropout",
       [](JobSubject& j, ParallelPlan&) { j.lora = j.dora_dropout = true; }},
      {"distributed-fused-adam-is-zero-1", "layout.zero",
       [](JobSubject& j, ParallelPlan& p) {
         j.apex_adam = true;
         p.zero_stage = 2;
       }},
      {"fp8-params-need-distributed-optimizer", "layout.zero",
       [](JobSubject& j, ParallelPlan& p) {
         j.fp8 = j.fp8_params = true;
         p.zero_stage = 0;
       }},
  };
  std::set<std::string> covered;
  for (const Case& c : cases) {
    INFO(c.rule);
    JobSubject job = on_two_nodes(llama3_8b());
    ParallelPlan plan = tp8_dp2();
    c.change(job, plan);
    const auto problem = first_job_problem(job, plan);
    REQUIRE(problem);
    CHECK(problem->rule == c.rule);
    CHECK(problem->fields.front() == c.field);
    CHECK_FALSE(problem->problem.empty());
    CHECK_FALSE(problem->hint.empty());
    covered.insert(c.rule);
  }
  // Every rule has its case, and no two rules share a name.
  std::set<std::string> names;
  for (const JobRule& rule : job_rules()) {
    CHECK(names.insert(std::string(rule.name)).second);
    CHECK(covered.count(std::string(rule.name)) == 1);
  }
}

TEST_CASE("a job breaking several rules reports them in the list's order, the first first") {
  JobSubject job = on_two_nodes(llama3_8b());
  ParallelPlan plan = tp8_dp2();
  plan.dp = 4;             // uses-every-gpu
  plan.zero_stage = 7;     // zero-stage, earlier in the list
  job.global_batch = 250;  // not a multiple of 2 x 4 either
  const std::vector<JobProblem> problems = job_problems(job, plan);
  REQUIRE(problems.size() == 3);
  CHECK(problems[0].rule == "zero-stage");
  CHECK(problems[1].rule == "uses-every-gpu");
  CHECK(problems[2].rule == "batch-splits-into-micro-batches");
  CHECK(first_job_problem(job, plan) == problems.front());
  CHECK(first_job_problem_at("training.global_batch", job, plan) == problems[2]);
  CHECK_FALSE(first_job_problem_at("layout.ep", job, plan));
}

TEST_CASE("a step's replay is bounded at 2^18 layer passes, told where it grows") {
  // llama3_8b's 32 layers: 8,192 micro-batches a rank are 2^18 passes, the most; one more
  // group of dp sequences is refused. Every stage is replayed: two stages pass them as well.
  JobSubject job = on_two_nodes(llama3_8b());
  ParallelPlan plan = tp8_dp2();
  job.micro_batch = 1;
  job.global_batch = 8192 * plan.dp;
  CHECK_FALSE(first_job_problem_at("training.global_batch", job, plan));
  job.global_batch = 8193 * plan.dp;
  const auto batch = first_job_problem_at("training.global_batch", job, plan);
  REQUIRE(batch);
  CHECK(batch->rule == "replay-within-bounds");
  CHECK_THAT(batch->problem, Catch::Contains("8193 micro-batches through 32 layers"));
  plan.tp = 4;
  plan.pp = 2;
  CHECK(first_job_problem_at("training.global_batch", job, plan));
  // Deep rather than long: reported at the layers first.
  job = on_two_nodes(llama3_8b());
  job.layers = 2000000000;
  const auto deep = first_job_problem(job, tp8_dp2());
  REQUIRE(deep);
  CHECK(deep->rule == "replay-within-bounds");
  CHECK(deep->fields.front() == "model.layers");
}

TEST_CASE("sizes of zero and products past 32 bits are problems, not crashes") {
  // A zero size ends the list: the rules after it divide by the sizes.
  ParallelPlan zero = tp8_dp2();
  zero.tp = 0;
  const std::vector<JobProblem> problems = job_problems(on_two_nodes(llama3_8b()), zero);
  REQUIRE(problems.size() == 1);
  CHECK(problems.front().rule == "positive-sizes");

  // micro_batch x dp in 64 bits: 2^29 x 2 = 2^30 (with dp 8 an int would wrap to 0 and divide
  // by it), and tp x dp = 8 x 2^30 ranks.
  JobSubject job = on_two_nodes(llama3_8b());
  job.micro_batch = 536870912;
  const auto batch = first_job_problem(job, tp8_dp2());
  REQUIRE(batch);
  CHECK(batch->rule == "batch-splits-into-micro-batches");
  CHECK_THAT(batch->problem, Catch::Contains("micro_batch x dp = 1073741824"));
  ParallelPlan huge = tp8_dp2();
  huge.dp = 1 << 30;
  const auto everything = first_job_problem(on_two_nodes(llama3_8b()), huge);
  REQUIRE(everything);
  CHECK(everything->rule == "uses-every-gpu");
  CHECK_THAT(everything->problem, Catch::Contains("got 8 x 1 x 1073741824"));
}
