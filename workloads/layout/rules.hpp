// The rules a parallel layout must satisfy with its model, training recipe and cluster: one
// list, each rule named, each broken rule a problem located at the scenario field to change.
//
// The scenario loader turns the first problem into a file:line:column error at that field,
// validate_job (workloads/model_spec.hpp) throws it, and the planner drops the layouts that
// break a rule, counting them as refused. Nothing else states a layout rule.
//
// The rules read what they need of the job as plain facts (JobSubject), so that this module
// stays below the workload model: workloads/model_spec.hpp builds a subject from a ModelSpec
// and a TrainingSpec. Rules that need the cluster (a tensor group inside an NVLink domain, the
// layout using every GPU, a host to offload to, FP8 tensor cores) apply when the subject has
// one; they read the node as topology describes it (node_spec.hpp, plain data, the one home of
// what an NVLink domain holds).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "topology/node_spec.hpp"
#include "workloads/layout/parallel_plan.hpp"

namespace fleetsim {

// What is wrong, at which field: paths from the scenario's top ("layout.tp",
// "training.global_batch"), the first one the scenario writes being where it is reported.
struct JobProblem {
  std::string rule;                 // the rule's name, e.g. "tp-divides-model"
  std::vector<std::string> fields;  // where to report it, likeliest first
  std::string problem;
  std::string hint;
  bool operator==(const JobProblem&) const = default;
};

// The cluster a job is placed on. The node is only looked at during the call.
struct JobCluster {
  const NodeSpec* node = nullptr;
  int nodes = 1;
  std::string gpu;       // the GPU profile's name
  bool gpu_fp8 = false;  // the profile has FP8 GEMM entries
  // The profile's dense FP16 peak, where it states one, is its BF16 one: FP16 runs the BF16
  // entries.
  bool gpu_fp16_at_bf16_rate = true;
};

// The facts of the model and training recipe the rules read.
struct JobSubject {
  std::string model;  // its name, for messages
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int ffn = 0;
  int dense_ffn = 0;          // a mixture of experts' dense layers' MLP, where it differs (0: none)
  int shared_expert_ffn = 0;  // a mixture of experts' shared expert (0: none)
  int vocab = 0;
  int experts = 0;            // 0: a dense model
  bool dense_layers = false;  // a mixture of experts with dense layers among its experts' ones
  int experts_per_token = 0;
  double expert_load = 1;              // the busiest expert-parallel rank's tokens over the mean
  bool allgather_dispatcher = false;   // the block gathers its tokens over tp (TokenDispatcher)
  bool shared_expert_overlap = false;  // the shared expert beside the dispatcher's exchanges
  int seq_len = 0;
  int global_batch = 0;
  int micro_batch = 0;
  bool flash_attention = true;
  bool local_attention = false;   // some layer attends within a window
  bool latent_attention = false;  // multi-head latent attention (DeepSeek)
  int mtp_layers = 0;             // multi-token prediction modules (DeepSeek-V3)
  bool fp32_adam = true;          // Adam with FP32 moments (what CPU Adam runs)
  bool apex_adam = false;         // Apex's DistributedFusedAdam (NeMo 1)
  bool lora = false;
  bool quantized_base = false;  // QLoRA
  bool dora_dropout = false;    // DoRA with dropout on its adapters' input
  bool fp8 = false;
  bool fp16 = false;        // FP16 with dynamic loss scaling
  bool fp8_params = false;  // projection weights kept in FP8 (Megatron-Core's fp8_param)
  std::optional<JobCluster> cluster;
};

// The rule that ep_comm_overlap runs as Megatron-Core allows it (the planner asks it alone).
inline constexpr std::string_view kEpCommOverlapRule = "ep-comm-overlap-as-megatron-runs-it";

struct JobRule {
  std::string_view name;
  std::string_view summary;  // one line, for the reference
  std::optional<JobProblem> (*check)(const JobSubject&, const ParallelPlan&);
};

// A step's layer passes (its micro-batches x the model's layers, every stage's), as the rule
// replay-within-bounds bounds them, and about the memory each takes to build and replay
// (measured: 0.56 GB for 1,024 micro-batches of Llama-3-8B's 32 layers under tp 8, 4.2 GB for
// 8,192).
std::int64_t step_layer_passes(const JobSubject& subject, const ParallelPlan& plan);
inline constexpr double kReplayBytesPerLayerPass = 16e3;

// Every rule, in the order they are checked: a layout breaking several is reported by the
// first, which a person fixes first.
std::span<const JobRule> job_rules();
// Every rule the layout breaks, in that order.
std::vector<JobProblem> job_problems(const JobSubject& subject, const ParallelPlan& plan);
std::optional<JobProblem> first_job_problem(const JobSubject& subject, const ParallelPlan& plan);
// The first problem reported at `field` ("layout.ep"): whether the value there is allowed, the
// rest of the layout aside.
std::optional<JobProblem> first_job_problem_at(std::string_view field, const JobSubject& subject,
                                               const ParallelPlan& plan);

}  // namespace fleetsim
