#include "workloads/layout/rules.hpp"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <iomanip>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>

#include "workloads/layout/sharding.hpp"
#include "workloads/layout/stage_split.hpp"

namespace fleetsim {
namespace {

using Problem = std::optional<JobProblem>;
// Products of layout sizes in 64 bits, saturating (size_product): a scenario may give sizes
// whose product overflows an int.
using Wide = std::int64_t;

std::string str(Wide n) {
  return std::to_string(n);
}

// A share or ratio as a person writes it: 2, 2.5, 1.333.
std::string decimal(double x) {
  std::ostringstream out;
  out << std::setprecision(4) << x;
  return out.str();
}

Problem at(std::vector<std::string> fields, std::string problem, std::string hint) {
  return JobProblem{{}, std::move(fields), std::move(problem), std::move(hint)};
}

// ---- sizes -----------------------------------------------------------------------------------

// dp: auto leaves dp 0 where tp x cp x pp does not divide the GPUs (data_parallel_size_for).
Problem automatic_dp_divides(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.dp != 0 || !job.cluster || plan.tp < 1 || plan.cp < 1 || plan.pp < 1) return {};
  const Wide gpus = size_product({job.cluster->nodes, job.cluster->node->gpus});
  if (gpus % size_product({plan.tp, plan.cp, plan.pp}) == 0) return {};
  return at({"layout.dp"},
            "dp: auto needs tp x cp x pp = " + str(size_product({plan.tp, plan.cp, plan.pp})) +
                " to divide the " + str(gpus) + " GPUs",
            "change tp, cp or pp, or cluster.nodes");
}

Problem positive_sizes(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.tp >= 1 && plan.cp >= 1 && plan.dp >= 1 && plan.pp >= 1 && plan.vpp >= 1 &&
      plan.ep >= 1 && job.micro_batch >= 1 && job.seq_len >= 1 && job.global_batch >= 1) {
    return {};
  }
  return at({"layout"},
            "tp, cp, dp, pp, vpp, ep, the batch, micro-batch and sequence length must "
            "be positive",
            "give each a whole number of at least 1");
}

Problem zero_stage(const JobSubject&, const ParallelPlan& plan) {
  if (plan.zero_stage >= 0 && plan.zero_stage <= 3) return {};
  return at({"layout.zero"}, "ZeRO stage must be 0-3", "zero: 0, 1, 2 or 3");
}

// ---- tensor parallelism ----------------------------------------------------------------------

// The tensor-parallel group shares its activations every layer: it stays inside a node, or in
// whole nodes of an NVLink domain (the trays of a GB200 NVL72).
Problem tp_in_nvlink_domain(const JobSubject& job, const ParallelPlan& plan) {
  if (!job.cluster || plan.tp == 1) return {};
  const NodeSpec& node = *job.cluster->node;
  if (node.nvlink_group_fits(plan.tp)) return {};
  const int domain = node.gpus * node.nvlink_domain_nodes;
  const bool spans = domain > node.gpus;
  return at({"layout.tp", "layout"},
            "tp " + str(plan.tp) + " does not divide the " + str(node.gpus) + " GPUs of a node" +
                (spans ? ", nor is it a multiple of them that divides the " + str(domain) +
                             " GPUs of its NVLink domain"
                       : ""),
            "a tensor-parallel group must fit in a node" +
                std::string(spans ? " or in whole nodes of its NVLink domain" : "") +
                ": use a divisor of " + str(node.gpus) +
                (spans ? " or a multiple of it that divides " + str(domain) : ""));
}

Problem tp_divides_model(const JobSubject& job, const ParallelPlan& plan) {
  for (const auto& [what, size] : {std::pair{"heads", job.heads},
                                   {"kv_heads", job.kv_heads},
                                   {"ffn", job.ffn},
                                   {"dense_ffn", job.dense_ffn},
                                   {"shared_expert_ffn", job.shared_expert_ffn},
                                   {"vocab", job.vocab}}) {
    if (size > 0 && size % plan.tp != 0) {
      return at(
          {"layout.tp", "layout"},
          "tp " + str(plan.tp) + " does not divide the model's " + what + " (" + str(size) + ")",
          "tensor parallelism splits heads, KV heads, the MLP and the vocabulary evenly");
    }
  }
  return {};
}

Problem tp_divides_sequence(const JobSubject& job, const ParallelPlan& plan) {
  if (!plan.sequence_parallel || job.seq_len % plan.tp == 0) return {};
  return at({"layout.tp", "layout"},
            "tp " + str(plan.tp) + " does not divide seq_len " + str(job.seq_len),
            "sequence parallelism shards each sequence evenly over the tp ranks");
}

Problem tp_comm_overlap_needs_tp(const JobSubject&, const ParallelPlan& plan) {
  if (!plan.tp_comm_overlap || plan.tp > 1) return {};
  return at({"layout.tp_comm_overlap"}, "tp_comm_overlap needs tensor parallelism (tp > 1)",
            "it overlaps the tensor-parallel all-gathers and reduce-scatters with their GEMMs");
}

Problem moe_tp_needs_sequence_parallel(const JobSubject& job, const ParallelPlan& plan) {
  if (job.experts == 0 || plan.tp == 1 || plan.sequence_parallel) return {};
  return at({"layout.sequence_parallel"},
            "a mixture of experts with tp > 1 needs sequence parallelism",
            "Megatron-Core refuses MoE layers with tensor parallelism but no sequence "
            "parallelism; remove sequence_parallel: false");
}

Problem latent_attention_tp_needs_sequence_parallel(const JobSubject& job,
                                                    const ParallelPlan& plan) {
  if (!job.latent_attention || plan.tp == 1 || plan.sequence_parallel) return {};
  return at({"layout.sequence_parallel"},
            "latent attention with tp > 1 is modelled with sequence parallelism",
            "its down projections run whole on each rank's sequence shard, as Megatron-Core "
            "runs them with it; remove sequence_parallel: false");
}

Problem sequence_parallel_off_needs_tp(const JobSubject&, const ParallelPlan& plan) {
  if (plan.sequence_parallel || plan.tp > 1) return {};
  return at({"layout.sequence_parallel"},
            "sequence_parallel: false needs tensor parallelism (tp > 1)",
            "it chooses how tensor-parallel ranks share the activations between blocks; remove "
            "it with tp 1");
}

Problem grad_reduce_after_backward_needs_zero_0_1(const JobSubject&, const ParallelPlan& plan) {
  if (plan.overlap_grad_reduce || plan.zero_stage <= 1) return {};
  return at({"layout.overlap_grad_reduce", "layout.zero"},
            "overlap_grad_reduce: false needs zero 0 or 1",
            "ZeRO 2 and 3 reduce-scatter each micro-batch's gradients as its backward runs "
            "(FSDP under a pipeline once the last backward is done, of itself); with them, leave "
            "overlap_grad_reduce out");
}

Problem param_gather_overlap_needs_grad_overlap(const JobSubject&, const ParallelPlan& plan) {
  if (!plan.overlap_param_gather || plan.overlap_grad_reduce) return {};
  return at({"layout.overlap_param_gather", "layout.overlap_grad_reduce"},
            "overlap_param_gather needs overlap_grad_reduce",
            "Megatron-LM refuses the one without the other (\"Must use --overlap-param-gather "
            "with --overlap-grad-reduce\")");
}

Problem param_gather_overlap_needs_zero(const JobSubject&, const ParallelPlan& plan) {
  if (!plan.overlap_param_gather || plan.zero_stage == 1 || plan.zero_stage == 2) return {};
  return at({"layout.overlap_param_gather"},
            "overlap_param_gather needs the distributed optimizer (zero 1 or 2)",
            "it overlaps the gather of the updated parameter shards with the next forward; "
            "ZeRO-3 gathers before each unit anyway");
}

Problem fsdp2_needs_zero_3(const JobSubject&, const ParallelPlan& plan) {
  if (!plan.fsdp2 || plan.zero_stage == 3) return {};
  return at({"layout.fsdp2"}, "fsdp2 needs sharded parameters (zero 3)",
            "it is how PyTorch's fully_shard gathers and reduces the parameters ZeRO 3 shards");
}

// A BF16 copy of a shard is what ZeRO 3 keeps; PyTorch's fully_shard keeps none.
Problem bf16_shards_need_zero_3(const JobSubject&, const ParallelPlan& plan) {
  if (!plan.bf16_shards) return {};
  if (plan.zero_stage != 3) {
    return at({"layout.bf16_shards"}, "bf16_shards describes ZeRO 3's weight shards",
              "use zero: 3, or remove bf16_shards");
  }
  if (!plan.fsdp2) return {};
  return at({"layout.bf16_shards"},
            "fsdp2 (PyTorch's fully_shard) keeps no BF16 copy of a shard: its FP32 shard is the "
            "parameter",
            "remove bf16_shards, or fsdp2 for DeepSpeed's ZeRO-3 or Megatron FSDP");
}

// ---- optimizer offload -----------------------------------------------------------------------

Problem offload_needs_zero(const JobSubject&, const ParallelPlan& plan) {
  if (!plan.offload_optimizer || plan.zero_stage >= 1) return {};
  return at({"layout.offload_optimizer"}, "offload_optimizer needs ZeRO 1, 2 or 3",
            "each rank offloads its shard of the optimizer states: set zero: 1 or more");
}

Problem offload_needs_fp32_adam(const JobSubject& job, const ParallelPlan& plan) {
  if (!plan.offload_optimizer || job.fp32_adam) return {};
  return at({"layout.offload_optimizer"},
            "offload_optimizer runs CPU Adam with FP32 moments, not 8-bit Adam",
            "remove optimizer: adam8bit, or offload_optimizer");
}

// Apex's DistributedFusedAdam shards its states over the replicas and, in the contiguous
// buffer NeMo 1 requires (megatron_base_model.py), keeps every gradient whole: ZeRO 1, on the
// GPU (or 0 with one replica, nothing to shard over).
Problem distributed_fused_adam_is_zero_1(const JobSubject& job, const ParallelPlan& plan) {
  const bool sharded_once =
      plan.zero_stage == 1 || (plan.zero_stage == 0 && plan.gradient_ranks() == 1);
  if (!job.apex_adam || (sharded_once && !plan.offload_optimizer)) return {};
  return at({"layout.zero", "training.optimizer"},
            "optimizer distributed_fused_adam is ZeRO 1 on the GPU: its states sharded, its "
            "gradients whole in a contiguous buffer",
            "set zero: 1 (and offload_optimizer: false), or optimizer: adam");
}

// A key of the node preset's host, its value, and an example of how a scenario writes it.
using HostKey = std::tuple<const char*, double, const char*>;

// The first of `keys` the node leaves unset, as a problem of `field`, which `what` needs.
Problem node_describes(const NodeSpec& node, const std::string& field, const std::string& what,
                       std::initializer_list<HostKey> keys) {
  for (const auto& [key, value, example] : keys) {
    if (!(value > 0)) {
      return at({field},
                what + " needs the node's " + std::string(key) + ", which node " + node.name +
                    " does not give",
                "add it to the node (node: {preset: " + node.name + ", " + key + ": " + example +
                    "}), with its source");
    }
  }
  return {};
}

HostKey host_memory_key(const NodeSpec& node) {
  return {"host_memory", node.host_memory_bytes_per_s, "614.4GB/s"};
}
HostKey host_capacity_key(const NodeSpec& node) {
  return {"host_memory_capacity", node.host_memory_capacity_bytes, "2TB"};
}

// The host work of an offloaded optimizer runs on what the node preset says of its host.
Problem offload_needs_host(const JobSubject& job, const ParallelPlan& plan) {
  if (!plan.offload_optimizer || !job.cluster) return {};
  const NodeSpec& node = *job.cluster->node;
  return node_describes(
      node, "layout.offload_optimizer", "offload_optimizer",
      {host_memory_key(node),
       host_capacity_key(node),
       {"cpu_cores", static_cast<double>(node.cpu_cores), "112"},
       {"cpu_clock", node.cpu_clock_hz, "2.0GHz"},
       {"cpu_adam_cycles_per_parameter", node.cpu_adam_cycles_per_parameter, "0.7"}});
}

// ---- activation offload ----------------------------------------------------------------------

// Megatron-Core offloads the first N of the model's layers, never all of them: the last one's
// backward follows its forward at once (transformer_config.py asserts 0 <= N < num_layers).
Problem activation_offload_within_layers(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.activation_offload_layers < job.layers) return {};
  return at({"layout.activation_offload_layers"},
            "activation_offload_layers " + std::to_string(plan.activation_offload_layers) +
                " leaves no layer of " + job.model + "'s " + std::to_string(job.layers) +
                " on the GPU",
            "offload at most " + std::to_string(job.layers - 1) + " layers");
}

// As Megatron-Core runs it: it refuses CPU offloading with pipeline parallelism and with
// activation recomputation (transformer_config.py); beside an offloaded optimizer it is not
// modelled.
Problem activation_offload_as_megatron_runs_it(const JobSubject&, const ParallelPlan& plan) {
  if (plan.activation_offload_layers == 0) return {};
  if (plan.pp > 1) {
    return at({"layout.activation_offload_layers", "layout.pp"},
              "activation offload with pp > 1 (Megatron-Core refuses CPU offloading with a "
              "pipeline)",
              "set pp: 1, or activation_offload_layers: 0");
  }
  if (plan.recompute != Recompute::none) {
    return at({"layout.activation_offload_layers", "layout.recompute"},
              "activation offload with recomputation (Megatron-Core refuses them together)",
              "set recompute: none, or activation_offload_layers: 0");
  }
  if (plan.offload_optimizer) {
    return at({"layout.activation_offload_layers", "layout.offload_optimizer"},
              "activation offload beside an offloaded optimizer is not modelled",
              "set offload_optimizer: false, or activation_offload_layers: 0");
  }
  return {};
}

// The copies cross the node's host memory, which its preset must describe.
Problem activation_offload_needs_host(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.activation_offload_layers == 0 || !job.cluster) return {};
  const NodeSpec& node = *job.cluster->node;
  return node_describes(node, "layout.activation_offload_layers", "activation offload",
                        {host_memory_key(node), host_capacity_key(node)});
}

// ---- expert and context parallelism ----------------------------------------------------------

Problem ep_needs_experts(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.ep <= 1 || job.experts > 0) return {};
  return at({"layout.ep"}, "ep " + str(plan.ep) + " needs a mixture-of-experts model",
            "remove ep, or use e.g. mixtral-8x7b");
}

// Megatron-Core lays the experts over tp x cp x dp as if cp were part of dp (its expert rank
// generator has cp 1: megatron/core/parallel_state.py), so an expert group is ep consecutive
// replicas of dp x cp.
Problem ep_divides_experts(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.ep <= 1 || job.experts == 0) return {};
  const Wide replicas = size_product({plan.dp, plan.cp});
  if (plan.expert_tp == 1 && plan.tp > 1) {
    // Each expert whole: an expert group is ep consecutive ranks of the stage, filling whole
    // replicas or whole parts of one.
    const Wide ranks = size_product({plan.tp, plan.dp, plan.cp});
    const bool aligned = plan.ep % plan.tp == 0 || plan.tp % plan.ep == 0;
    if (job.experts % plan.ep == 0 && ranks % plan.ep == 0 && aligned) return {};
    return at({"layout.ep"},
              "with expert_tp 1, ep " + str(plan.ep) + " must divide the model's " +
                  str(job.experts) + " experts and a stage's tp x dp x cp = " + str(ranks) +
                  " ranks, and divide tp " + str(plan.tp) + " or be a multiple of it",
              "the expert groups are ep consecutive ranks of a stage, each holding experts / ep");
  }
  if (job.experts % plan.ep == 0 && replicas % plan.ep == 0) return {};
  const std::string of_replicas = plan.cp > 1 ? "dp x cp = " + str(replicas) : "dp " + str(plan.dp);
  return at({"layout.ep"},
            "ep " + str(plan.ep) + " must divide the model's " + str(job.experts) +
                " experts and " + of_replicas,
            "the expert groups are ep consecutive replicas (dp x cp of them), each holding "
            "experts / ep");
}

// The experts' own tensor parallelism: the layout's tp, or 1 under expert parallelism (each
// expert whole on its rank). ZeRO 3's gathered units count an experts' layer's experts as split
// over tp.
Problem expert_tp_as_modelled(const JobSubject&, const ParallelPlan& plan) {
  if (plan.expert_tp == 0 || plan.expert_tp == plan.tp) return {};
  if (plan.expert_tp != 1) {
    return at({"layout.expert_tp"},
              "expert_tp " + str(plan.expert_tp) + " is modelled as tp (" + str(plan.tp) + ") or 1",
              "set expert_tp: 1 to keep each expert whole, or remove it (tp, Megatron-Core's "
              "default)");
  }
  if (plan.ep <= 1) {
    return at({"layout.expert_tp", "layout.ep"},
              "expert_tp 1 lays experts over expert-parallel groups, and ep is " + str(plan.ep),
              "set ep above 1, or remove expert_tp");
  }
  if (plan.zero_stage < 3) return {};
  return at({"layout.expert_tp", "layout.zero"}, "expert_tp 1 is modelled with ZeRO 0-2",
            "remove expert_tp, or set zero to 0, 1 or 2");
}

// The optimizer offload's copies of the reduced shards are sized by the dense parameters' shard
// alone. Megatron-Core's allgather dispatcher under expert parallelism gathers every token of
// the tp x ep ranks, a group the layout does not form.
Problem ep_as_modelled(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.ep <= 1) return {};
  if (plan.offload_optimizer) {
    return at({"layout.ep", "layout.offload_optimizer"},
              "expert parallelism is modelled without offload_optimizer",
              "remove offload_optimizer, or ep");
  }
  if (!job.allgather_dispatcher) return {};
  return at({"layout.ep", "training.token_dispatcher"},
            "token_dispatcher allgather is modelled with ep 1",
            "set token_dispatcher: alltoall (Megatron-Core's choice for expert parallelism), "
            "or remove ep");
}

// The shared expert overlaps the all-to-all dispatcher's exchanges: Megatron-Core refuses the
// option with the allgather dispatcher (transformer_config.py at d98e8a64); without a shared
// expert there is nothing to overlap.
Problem shared_expert_overlap_as_modelled(const JobSubject& job, const ParallelPlan&) {
  if (!job.shared_expert_overlap) return {};
  if (job.shared_expert_ffn == 0) {
    return at({"training.shared_expert_overlap"}, "the model has no shared expert to overlap",
              "remove shared_expert_overlap");
  }
  if (!job.allgather_dispatcher) return {};
  return at({"training.shared_expert_overlap", "training.token_dispatcher"},
            "shared_expert_overlap runs beside the all-to-all dispatcher's exchanges",
            "set token_dispatcher: alltoall, or remove shared_expert_overlap");
}

// Megatron-Core's checks on overlap_moe_expert_parallel_comm (transformer_config.py, core
// 0.14 on): expert parallelism; pp 1 or an interleaved pipeline, whose warm-up it lengthens by
// one forward; no full recomputation; not beside shared_expert_overlap; one multi-token
// prediction module at most. Sharded parameters (ZeRO 3) and activation offload beside it are
// not modelled.
Problem ep_comm_overlap_as_megatron_runs_it(const JobSubject& job, const ParallelPlan& plan) {
  if (!plan.ep_comm_overlap) return {};
  const std::vector<std::string> key{"layout.ep_comm_overlap"};
  const auto with = [&](const std::string& other) {
    return std::vector<std::string>{"layout.ep_comm_overlap", other};
  };
  if (plan.ep == 1) {
    return at(key, "ep_comm_overlap needs expert parallelism (ep > 1)",
              "it overlaps the experts' all-to-alls; set ep, or remove ep_comm_overlap");
  }
  if (plan.pp > 1 && plan.vpp == 1) {
    return at(with("layout.vpp"),
              "ep_comm_overlap with pp > 1 needs the interleaved schedule (Megatron-Core "
              "merges a forward and a backward only with pp 1 or virtual stages)",
              "set vpp to 2 or more, or remove ep_comm_overlap");
  }
  if (plan.recompute == Recompute::full) {
    return at(with("layout.recompute"),
              "ep_comm_overlap with full recomputation (Megatron-Core refuses them together)",
              "set recompute: selective or none, or remove ep_comm_overlap");
  }
  if (job.shared_expert_overlap) {
    return at(with("training.shared_expert_overlap"),
              "ep_comm_overlap beside shared_expert_overlap (Megatron-Core refuses them "
              "together: the shared expert runs beside the other micro-batch's exchanges)",
              "remove shared_expert_overlap");
  }
  if (job.mtp_layers > 1) {
    return at(with("model.mtp_layers"),
              "ep_comm_overlap with more than one multi-token prediction module (Megatron-Core "
              "merges one at most)",
              "remove ep_comm_overlap");
  }
  if (plan.zero_stage == 3) {
    return at(with("layout.zero"), "ep_comm_overlap with ZeRO 3 is not modelled yet",
              "use zero: 1 or 2, or remove ep_comm_overlap");
  }
  if (plan.activation_offload_layers > 0) {
    return at(with("layout.activation_offload_layers"),
              "ep_comm_overlap beside activation offload is not modelled yet",
              "set activation_offload_layers: 0, or remove ep_comm_overlap");
  }
  return {};
}

// Each sequence is cut into 2 x cp chunks (two a rank, so causal work is even), each split
// again by sequence parallelism.
Problem cp_divides_sequence(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.cp <= 1) return {};
  // Sequence parallelism shards each chunk again over tp.
  const Wide chunks = size_product({2, plan.cp, plan.sequence_shards()});
  if (job.seq_len % chunks == 0) return {};
  const std::string product = plan.sequence_parallel ? "2 x cp x tp" : "2 x cp";
  return at({"layout.cp"},
            "cp " + str(plan.cp) + " cuts each sequence into 2 x cp chunks" +
                (plan.sequence_parallel ? " that tp " + str(plan.tp) + " shards again" : "") +
                ": " + product + " = " + str(chunks) + " must divide seq_len " + str(job.seq_len),
            "pick a cp whose " + product + " divides the sequence length");
}

Problem cp_needs_flash_attention(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.cp <= 1 || job.flash_attention) return {};
  return at({"layout.cp"},
            "cp " + str(plan.cp) + " runs its attention (ring or Ulysses) on FlashAttention",
            "set training.attention: flash, or remove cp");
}

// The busiest of ep ranks gets at most every token's copies that fit its experts: each token
// sends at most min(k, E / ep) of its k copies to one rank, so at most ep min(k, E / ep) / k
// = min(ep, E / k) times the mean.
Problem expert_load_within_group(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.ep <= 1 || job.experts_per_token < 1) return {};
  const double most = std::min(static_cast<double>(plan.ep),
                               static_cast<double>(job.experts) / job.experts_per_token);
  if (job.expert_load <= most) return {};
  return at({"training.expert_load_imbalance", "layout.ep"},
            "the busiest of " + str(plan.ep) + " expert-parallel ranks gets at most " +
                decimal(most) + " times the mean of the tokens, not " + decimal(job.expert_load),
            "give an imbalance of at most min(ep, experts / experts_per_token)");
}

// Ring attention passes every rank's keys around whole; a window would skip some of its steps.
// Ulysses' ranks see whole sequences, windows and all.
Problem cp_without_local_attention(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.cp <= 1 || !job.local_attention || plan.ulysses()) return {};
  return at({"layout.cp"},
            "cp " + str(plan.cp) + " with " + job.model +
                "'s local (sliding-window or chunked) attention is not modelled with ring "
                "attention",
            "set cp_comm_type: a2a (Ulysses), or remove cp");
}

// Ulysses gives each cp rank heads / cp of the rank's heads, queries' and keys' alike
// (Transformer Engine asserts num_heads % cp_size == 0 for Q, K and V).
Problem cp_a2a_splits_heads(const JobSubject& job, const ParallelPlan& plan) {
  if (!plan.ulysses()) return {};
  const Wide split = size_product({plan.tp, plan.cp});
  if (job.heads % split == 0 && job.kv_heads % split == 0) return {};
  return at({"layout.cp_comm_type", "layout.cp"},
            "cp_comm_type a2a gives each rank heads / (tp x cp): tp x cp = " + str(split) +
                " must divide the " + str(job.heads) + " query heads and " + str(job.kv_heads) +
                " key-value heads",
            "pick a cp that divides the KV heads / tp, or set cp_comm_type: p2p");
}

// ---- pipeline --------------------------------------------------------------------------------

Problem vpp_needs_1f1b_pipeline(const JobSubject&, const ParallelPlan& plan) {
  if (plan.vpp <= 1) return {};
  if (plan.pp >= 2 && plan.schedule == PipelineSchedule::one_f_one_b) return {};
  return at({"layout.vpp"}, "virtual stages need a pipeline (pp > 1) with the 1f1b schedule",
            "vpp > 1 interleaves each stage's chunks in Megatron-LM's 1F1B");
}

Problem virtual_stages_within_layers(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.vpp <= 1 || size_product({plan.pp, plan.vpp}) <= job.layers) return {};
  return at({"layout.vpp"},
            "pp x vpp = " + str(size_product({plan.pp, plan.vpp})) +
                " is more virtual stages than the model's " + str(job.layers) + " layers",
            "each virtual stage holds at least one layer");
}

Problem stages_within_layers(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.pp <= job.layers) return {};
  return at(
      {"layout.pp"},
      "pp " + str(plan.pp) + " is more stages than the model's " + str(job.layers) + " layers",
      "each pipeline stage holds at least one layer");
}

// Megatron-Core places every multi-token prediction module on the last stage
// (get_mtp_num_layers_to_build); the split gives the last virtual stage a slot per layer or
// module (stage_split.hpp).
Problem mtp_on_last_stage(const JobSubject& job, const ParallelPlan& plan) {
  if (job.mtp_layers == 0) return {};
  const int stages = plan.pp * plan.vpp;
  const int last = split_stage_slots(job.layers + job.mtp_layers, stages, stages - 1).count();
  if (last >= job.mtp_layers) return {};
  return at({plan.vpp > 1 ? "layout.vpp" : "layout.pp"},
            "the last of " + str(stages) + " virtual stages holds " + str(last) +
                " layers or modules, fewer than the model's " + str(job.mtp_layers) +
                " multi-token prediction modules, which all run on the last stage",
            "use fewer pipeline stages, or fewer mtp_layers");
}

// A stage's parameters serve each of its micro-batches, so a pipeline keeps them whole for the
// step. Megatron-LM and DeepSpeed shard optimizer states at most (ZeRO 0-1); Llama 3's FSDP
// shards the gradients too (ZeRO 2, arXiv:2407.21783 Section 3.3.2; sharding.hpp says how it
// reduces); PyTorch's pipelining runs fully_shard (fsdp2) with its units gathered for the
// step (sharding.hpp). ZeRO 3 gathering parameters again for every micro-batch is not modelled.
Problem pipeline_keeps_parameters(const JobSubject&, const ParallelPlan& plan) {
  if (plan.pp <= 1 || plan.zero_stage <= 2 || fsdp_under_pipeline(plan)) return {};
  return at({"layout.zero", "layout.pp"},
            "ZeRO 3 without fsdp2 does not combine with pp " + str(plan.pp),
            "under a pipeline shard optimizer states (zero 1, as Megatron-LM and DeepSpeed "
            "do), gradients too (zero 2, as Llama 3's FSDP did), or run PyTorch's FSDP under "
            "PyTorch's pipelining (zero 3 with fsdp2: true, as torchtitan does)");
}

// ---- the cluster and the batch ---------------------------------------------------------------

Problem uses_every_gpu(const JobSubject& job, const ParallelPlan& plan) {
  if (!job.cluster) return {};
  const Wide gpus = size_product({job.cluster->nodes, job.cluster->node->gpus});
  const Wide model_ranks = size_product({plan.tp, plan.cp, plan.pp});
  if (size_product({model_ranks, plan.dp}) == gpus) return {};
  const bool cp = plan.cp > 1;
  return at({"layout.dp", "layout"},
            "tp" + std::string(cp ? " x cp" : "") + " x pp x dp must equal the GPU count (" +
                str(gpus) + " = " + str(job.cluster->nodes) + " nodes x " +
                str(job.cluster->node->gpus) + " GPUs), got " + str(plan.tp) +
                (cp ? " x " + str(plan.cp) : "") + " x " + str(plan.pp) + " x " + str(plan.dp),
            "set layout.dp to " + str(gpus / model_ranks) + " or change cluster.nodes");
}

// Each rank runs global_batch / (micro_batch x dp) micro-batches of gradient accumulation per
// optimizer step, which must be a whole number.
Problem batch_splits_into_micro_batches(const JobSubject& job, const ParallelPlan& plan) {
  const Wide per_pass = size_product({job.micro_batch, plan.dp});
  if (job.global_batch % per_pass == 0) return {};
  return at({"training.global_batch"},
            "global_batch " + str(job.global_batch) +
                " is not a multiple of micro_batch x dp = " + str(per_pass),
            "gradient accumulation runs global_batch / (micro_batch x dp) micro-batches per "
            "step; use a multiple of " +
                str(per_pass));
}

// A step's replay holds each forward and backward pass of a layer, every stage's (each stage
// is replayed: one replica of it, sim/step/folding.hpp): about 16 KB of tasks and flows a
// pass (measured: Llama-3-8B at tp 8, 32 layers, 1,024 and 8,192 micro-batches a step: 0.56
// and 4.2 GB, 2.4 and 25 s). Past 2^18 passes, about 4 GB, a step is refused before anything
// is built.
constexpr Wide kMostLayerPasses = Wide{1} << 18;

// The step's micro-batches per replica (at least 1; 0 where micro_batch x dp is not a size).
Wide step_micro_batches(const JobSubject& job, const ParallelPlan& plan) {
  const Wide per_pass = size_product({job.micro_batch, plan.dp});
  return per_pass < 1 ? 0 : std::max<Wide>(1, job.global_batch / per_pass);
}

Problem replay_within_bounds(const JobSubject& job, const ParallelPlan& plan) {
  const Wide micro_batches = step_micro_batches(job, plan);
  const Wide layers = job.layers;
  const Wide passes = micro_batches * layers;  // step_layer_passes
  if (passes <= kMostLayerPasses) return {};
  // Reported where the larger factor is set.
  std::vector<std::string> fields{"training.global_batch", "model.layers"};
  if (layers > micro_batches) std::swap(fields[0], fields[1]);
  const double gigabytes = static_cast<double>(passes) * kReplayBytesPerLayerPass / 1e9;
  return at(std::move(fields),
            "a step of " + str(micro_batches) + " micro-batches through " + str(layers) +
                " layers is " + str(passes) + " layer passes, about " +
                str(static_cast<Wide>(gigabytes)) + " GB to replay; fleetsim replays at most " +
                str(kMostLayerPasses),
            "fewer micro-batches a step (a smaller global_batch, a larger micro_batch or dp), "
            "or a model of fewer layers");
}

}  // namespace

std::int64_t step_layer_passes(const JobSubject& subject, const ParallelPlan& plan) {
  // Both factors are bounded (the global batch and the layers by the loader, at most 2^31
  // each): their product fits 64 bits.
  return step_micro_batches(subject, plan) * Wide{subject.layers};
}

namespace {

Problem micro_batch_group_needs_interleaving(const JobSubject&, const ParallelPlan& plan) {
  if (plan.microbatch_group == 0 || (plan.pp > 1 && plan.vpp > 1)) return {};
  return at({"layout.microbatch_group"},
            "microbatch_group needs an interleaved pipeline: it sets how many micro-batches "
            "each chunk runs in a row",
            "set pp and vpp above 1, or remove microbatch_group");
}

// Megatron-Core refuses a group smaller than pp (a chunk's pass would wait on itself around
// the pipeline) or larger than the step's micro-batches (forward_backward_pipelining_with_
// interleaving's ValueError).
Problem micro_batch_group_within_pp_and_batch(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.microbatch_group == 0 || plan.vpp <= 1) return {};
  const Wide m = job.global_batch / size_product({job.micro_batch, plan.dp});
  if (plan.microbatch_group >= plan.pp && plan.microbatch_group <= m) return {};
  return at({"layout.microbatch_group"},
            "microbatch_group " + str(plan.microbatch_group) + " is outside [pp " + str(plan.pp) +
                ", the step's micro-batches " + str(m) + "]",
            "Megatron-Core's interleaved schedule runs at least pp micro-batches of a chunk in "
            "a row and at most all of them");
}

// Megatron-LM's interleaved 1F1B runs micro-batches in groups of N (pp unless set); a last
// group of fewer than pp would stall the pipeline, and Megatron refuses it.
Problem interleaving_in_micro_batch_groups(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.vpp <= 1) return {};
  const Wide m = job.global_batch / size_product({job.micro_batch, plan.dp});
  const Wide group = plan.microbatch_group_size();
  if (m % group == 0 || m % group >= plan.pp) return {};
  if (plan.microbatch_group == 0) {
    return at({"layout.vpp"},
              "the interleaved schedule needs micro-batches per step (" + str(m) +
                  ") to be a multiple of pp " + str(plan.pp),
              "Megatron-LM's interleaved 1F1B runs micro-batches in groups of pp: adjust "
              "global_batch, set microbatch_group, or set vpp: 1");
  }
  return at({"layout.microbatch_group"},
            "the step's " + str(m) + " micro-batches leave a last group of " + str(m % group) +
                ", fewer than pp " + str(plan.pp),
            "choose a microbatch_group that divides " + str(m) + " or leaves at least pp");
}

// ---- the recipe ------------------------------------------------------------------------------

Problem lora_on_dense_model(const JobSubject& job, const ParallelPlan&) {
  if (!job.lora || job.experts == 0) return {};
  return at({"training.method"}, "LoRA on a mixture-of-experts model is not modelled yet",
            "fine-tune every weight (method: full)");
}

// A multi-token prediction module looks its tokens up in the embedding, which a ZeRO-3 unit
// would hold sharded, and its adapters would be LoRA's to place.
Problem mtp_as_modelled(const JobSubject& job, const ParallelPlan& plan) {
  if (job.mtp_layers == 0 || (!job.lora && plan.zero_stage <= 2)) return {};
  return at({job.lora ? "training.method" : "layout.zero"},
            "multi-token prediction is modelled in pre-training with ZeRO 0-2 (as Megatron-Core "
            "trains DeepSeek-V3)",
            job.lora ? "fine-tune without its modules (model mtp_layers: 0), or in full"
                     : "shard optimizer states and gradients (zero 1 or 2), or set the model's "
                       "mtp_layers: 0");
}

// torchtitan's per-op policy counts a dense layer's seven (or six) matmuls; a mixture of
// experts' grouped expert GEMMs, and LoRA's adapters, would count otherwise.
// Eager attention's softmax would rerun while its probabilities count as kept.
Problem per_op_on_dense_full_model(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.recompute != Recompute::per_op ||
      (job.experts == 0 && !job.lora && job.flash_attention && !job.latent_attention &&
       (plan.tp == 1 || plan.sequence_parallel))) {
    return {};
  }
  return at({"layout.recompute"},
            "per_op recomputation is modelled for dense models with ordinary attention trained "
            "in full on FlashAttention, with sequence parallelism where tp > 1 (as torchtitan "
            "runs it)",
            "use selective or full");
}

Problem fp8_needs_fp8_gpu(const JobSubject& job, const ParallelPlan&) {
  if (!job.fp8 || !job.cluster || job.cluster->gpu_fp8) return {};
  return at({"training.precision"}, "GPU profile " + job.cluster->gpu + " has no FP8 GEMM entries",
            "FP8 needs Hopper, Blackwell or MI300X tensor cores (profiles h100-sxm, h200, b200, "
            "gb200, mi300x); use precision: bf16");
}

Problem fp16_at_bf16_rate(const JobSubject& job, const ParallelPlan&) {
  if (!job.fp16 || !job.cluster || job.cluster->gpu_fp16_at_bf16_rate) return {};
  return at({"training.precision"},
            "FP16 runs on the profile's BF16 entries, but " + job.cluster->gpu +
                "'s dense_fp16 peak differs from its dense_bf16 one",
            "use precision: bf16, or a profile whose FP16 and BF16 peaks are equal");
}

// QLoRA dequantizes its 4-bit base to BF16 for each GEMM: there is no FP8 operand to run.
Problem fp8_without_quantized_base(const JobSubject& job, const ParallelPlan&) {
  if (!job.fp8 || !job.quantized_base) return {};
  return at({"training.precision"},
            "QLoRA's 4-bit base is dequantized to BF16 for its GEMMs, which FP8 does not run",
            "use precision: bf16 with qlora, or method: lora for FP8 base GEMMs");
}

// DoRA's dropout correction reruns the frozen projection on the dropped input outside the
// projection's own tensor-parallel exchanges, and is modelled on one tensor-parallel rank only
// (PEFT has no tensor parallelism for DoRA; NeMo feeds the correction the block's gathered
// input, which a sequence-parallel projection expects split: nemo/collections/llm/peft/dora.py
// at 8cfedd7).
Problem dora_dropout_without_tp(const JobSubject& job, const ParallelPlan& plan) {
  if (!job.dora_dropout || plan.tp == 1) return {};
  return at({"training.lora.dropout", "layout.tp"},
            "DoRA with adapter dropout is modelled without tensor parallelism (its dropout "
            "correction reruns the projection outside the tensor-parallel split)",
            "set lora.dropout: 0 (NeMo's default for DoRA), or tp: 1");
}

Problem recompute_layers_need_full(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.recompute_layers == 0) return {};
  if (plan.recompute != Recompute::full) {
    return at({"layout.recompute_layers"},
              "recompute_layers picks the layers that full recomputation reruns",
              "set recompute: full, or remove recompute_layers");
  }
  // The first N of each chunk: no more than the longest chunk has (an uneven split's).
  const Wide chunks = size_product({plan.pp, plan.vpp});
  const Wide longest = longest_stage_slots(Wide{job.layers} + job.mtp_layers, chunks);
  if (chunks == 0 || plan.recompute_layers <= longest) return {};
  return at({"layout.recompute_layers"},
            "recompute_layers " + str(plan.recompute_layers) + " is more than the " + str(longest) +
                " layers of a chunk (pp x vpp = " + str(chunks) + ")",
            "at most " + str(longest) + "; 0 reruns every layer");
}

Problem recompute_modules_need_selective(const JobSubject&, const ParallelPlan& plan) {
  if (plan.recompute_modules == RecomputeModules{} || plan.recompute == Recompute::selective) {
    return {};
  }
  return at({"layout.recompute_modules"},
            "recompute_modules picks what selective recomputation reruns",
            "set recompute: selective, or remove recompute_modules");
}

// Megatron-Core reruns a dense layer's MLP as mlp, a mixture of experts' as moe (or its
// activation, moe_act); a dense layer has no separate norm to discard (Transformer Engine
// fuses each into the projection after it, which keeps its own input).
Problem recompute_modules_fit_the_model(const JobSubject& job, const ParallelPlan& plan) {
  if (plan.recompute != Recompute::selective) return {};
  const RecomputeModules& modules = plan.recompute_modules;
  const bool moe = job.experts > 0;
  // (Megatron-Core reruns `mlp` in each layer whose MLP is dense: a mixture of experts' dense
  // layers among its experts' ones.)
  if (moe && !job.dense_layers && modules.mlp) {
    return at(
        {"layout.recompute_modules"},
        "mlp reruns a dense MLP block; every layer of " + job.model + " is a mixture of experts",
        "use moe for the whole block, or moe_act for the experts' activation");
  }
  if (!moe && (modules.moe || modules.moe_act || modules.layernorm)) {
    return at({"layout.recompute_modules"},
              "moe, moe_act and layernorm rerun parts of a mixture of experts' block (a dense "
              "layer's norms are fused into its projections); " +
                  job.model + " is dense",
              "use core_attn and mlp");
  }
  if (modules.moe && modules.moe_act) {
    return at({"layout.recompute_modules"},
              "moe reruns the whole block, the experts' activation with it",
              "keep moe or moe_act, not both");
  }
  return {};
}

// FP8 weights have no BF16 copy to update: Megatron-Core keeps them only beside the
// distributed optimizer's FP32 shard (--fp8-param-gather asserts use_distributed_optimizer or
// an FSDP; megatron/training/arguments.py). FSDP's FP8 gather is not modelled. A LoRA's frozen
// base has nothing to update: its FP8 weights are simply kept (NeMo's fp8_model_init).
Problem fp8_params_need_distributed_optimizer(const JobSubject& job, const ParallelPlan& plan) {
  if (!job.fp8_params) return {};
  if (job.lora && plan.zero_stage < 3 && !plan.offload_optimizer) return {};
  if (plan.offload_optimizer) {
    return at({"layout.offload_optimizer", "training.fp8_params"},
              "fp8_params with the optimizer offloaded (FP8 weights copied back from the host) "
              "is not modelled yet",
              "set offload_optimizer: false, or remove fp8_params");
  }
  if (plan.zero_stage == 1 || plan.zero_stage == 2) return {};
  return at({"layout.zero", "training.fp8_params"},
            plan.zero_stage == 0
                ? "fp8_params needs the distributed optimizer's FP32 master shard (ZeRO 1 or 2)"
                : "fp8_params with ZeRO 3 (FSDP gathering FP8 weights) is not modelled yet",
            "use zero: 1 (Megatron-Core's distributed optimizer), or remove fp8_params");
}

const JobRule kRules[] = {
    {"automatic-dp-divides", "dp: auto needs tp x cp x pp to divide the GPUs",
     automatic_dp_divides},
    {"positive-sizes", "every size of the layout and the batch is at least 1", positive_sizes},
    {"zero-stage", "ZeRO's stage is 0, 1, 2 or 3", zero_stage},
    {"tp-in-nvlink-domain",
     "a tensor-parallel group divides a node, or is whole nodes of its NVLink domain",
     tp_in_nvlink_domain},
    {"tp-divides-model", "tp divides the heads, KV heads, MLP and vocabulary", tp_divides_model},
    {"tp-divides-sequence", "tp divides the sequence, under sequence parallelism",
     tp_divides_sequence},
    {"tp-comm-overlap-needs-tp", "tp_comm_overlap needs tp > 1", tp_comm_overlap_needs_tp},
    {"moe-tp-needs-sequence-parallel",
     "a mixture of experts with tp > 1 needs sequence "
     "parallelism",
     moe_tp_needs_sequence_parallel},
    {"latent-attention-tp-needs-sequence-parallel",
     "latent attention with tp > 1 needs sequence parallelism",
     latent_attention_tp_needs_sequence_parallel},
    {"sequence-parallel-off-needs-tp", "sequence_parallel: false needs tp > 1",
     sequence_parallel_off_needs_tp},
    {"grad-reduce-after-backward-needs-zero-0-1", "overlap_grad_reduce: false needs ZeRO 0 or 1",
     grad_reduce_after_backward_needs_zero_0_1},
    {"param-gather-overlap-needs-zero-1-2", "overlap_param_gather needs ZeRO 1 or 2",
     param_gather_overlap_needs_zero},
    {"param-gather-overlap-needs-grad-overlap", "overlap_param_gather needs overlap_grad_reduce",
     param_gather_overlap_needs_grad_overlap},
    {"fsdp2-needs-zero-3", "fsdp2 needs ZeRO 3", fsdp2_needs_zero_3},
    {"bf16-shards-need-zero-3", "bf16_shards needs ZeRO 3, without fsdp2", bf16_shards_need_zero_3},
    {"offload-needs-zero", "optimizer offload needs ZeRO 1-3", offload_needs_zero},
    {"offload-needs-fp32-adam", "optimizer offload runs CPU Adam with FP32 moments",
     offload_needs_fp32_adam},
    {"offload-needs-host", "optimizer offload needs the node's host memory and cores described",
     offload_needs_host},
    {"activation-offload-within-layers", "activation_offload_layers below the model's layers",
     activation_offload_within_layers},
    {"activation-offload-as-megatron-runs-it",
     "activation offload with pp 1, no recomputation and no optimizer offload",
     activation_offload_as_megatron_runs_it},
    {"activation-offload-needs-host", "activation offload needs the node's host memory described",
     activation_offload_needs_host},
    {"distributed-fused-adam-is-zero-1", "optimizer distributed_fused_adam runs with ZeRO 1",
     distributed_fused_adam_is_zero_1},
    {"ep-needs-experts", "ep > 1 needs a mixture of experts", ep_needs_experts},
    {"ep-divides-experts-and-dp",
     "ep divides the experts and dp x cp (tp x dp x cp with expert_tp 1)", ep_divides_experts},
    {"shared-expert-overlap-as-modelled",
     "shared_expert_overlap with a shared expert and the all-to-all dispatcher",
     shared_expert_overlap_as_modelled},
    {kEpCommOverlapRule,
     "ep_comm_overlap with ep > 1, pp 1 or interleaving, no full recomputation, ZeRO 0-2, no "
     "activation offload, no shared_expert_overlap and one multi-token prediction module at "
     "most",
     ep_comm_overlap_as_megatron_runs_it},
    {"ep-as-modelled", "ep > 1 without optimizer offload, its tokens dispatched by all-to-all",
     ep_as_modelled},
    {"expert-tp-as-modelled", "expert_tp is tp, or 1 with ep > 1 and ZeRO 0-2",
     expert_tp_as_modelled},
    {"cp-divides-sequence", "2 x cp x tp divides the sequence", cp_divides_sequence},
    {"cp-needs-flash-attention", "cp > 1 runs its attention on FlashAttention",
     cp_needs_flash_attention},
    {"expert-load-within-group", "the busiest expert-parallel rank's load is possible",
     expert_load_within_group},
    {"cp-without-local-attention",
     "ring attention (cp_comm_type p2p) runs full causal attention only",
     cp_without_local_attention},
    {"cp-a2a-splits-heads", "under cp_comm_type a2a, tp x cp divides the query and KV heads",
     cp_a2a_splits_heads},
    {"vpp-needs-1f1b-pipeline", "vpp > 1 needs pp > 1 and the 1F1B schedule",
     vpp_needs_1f1b_pipeline},
    {"virtual-stages-within-layers", "pp x vpp is at most the layers",
     virtual_stages_within_layers},
    {"stages-within-layers", "pp is at most the layers", stages_within_layers},
    {"mtp-on-last-stage", "the last virtual stage holds every multi-token prediction module",
     mtp_on_last_stage},
    {"pipeline-keeps-parameters", "a pipeline runs with ZeRO 0-2, or ZeRO 3 with fsdp2",
     pipeline_keeps_parameters},
    {"uses-every-gpu", "tp x cp x pp x dp is the cluster's GPU count", uses_every_gpu},
    {"batch-splits-into-micro-batches", "micro_batch x dp divides the global batch",
     batch_splits_into_micro_batches},
    {"replay-within-bounds", "a step replays at most 2^18 layer passes (about 4 GB)",
     replay_within_bounds},
    {"micro-batch-group-needs-interleaving", "microbatch_group needs pp > 1 and vpp > 1",
     micro_batch_group_needs_interleaving},
    {"micro-batch-group-within-pp-and-batch",
     "microbatch_group between pp and the step's micro-batches",
     micro_batch_group_within_pp_and_batch},
    {"interleaving-in-micro-batch-groups",
     "under vpp > 1 the micro-batches come in groups of microbatch_group (pp), the last of "
     "at least pp",
     interleaving_in_micro_batch_groups},
    {"recompute-layers-need-full",
     "recompute_layers needs recompute: full, and is at most a chunk's layers",
     recompute_layers_need_full},
    {"recompute-modules-need-selective", "recompute_modules needs recompute: selective",
     recompute_modules_need_selective},
    {"recompute-modules-fit-the-model",
     "recompute_modules: mlp on a dense model; moe, moe_act and layernorm on a mixture of "
     "experts, moe without moe_act",
     recompute_modules_fit_the_model},
    {"lora-on-dense-model", "LoRA on a dense model", lora_on_dense_model},
    {"mtp-as-modelled", "multi-token prediction trains in full with ZeRO 0-2", mtp_as_modelled},
    {"per-op-recompute-on-dense-full-model",
     "per_op recomputation on a dense model trained in full on FlashAttention",
     per_op_on_dense_full_model},
    {"fp8-needs-fp8-gpu", "FP8 needs a GPU profile with FP8 GEMM entries", fp8_needs_fp8_gpu},
    {"fp8-without-quantized-base", "FP8 without QLoRA's 4-bit base", fp8_without_quantized_base},
    {"dora-dropout-without-tp", "DoRA's adapter dropout on one tensor-parallel rank",
     dora_dropout_without_tp},
    {"fp8-params-need-distributed-optimizer",
     "fp8_params needs ZeRO 1 or 2, not offloaded (a LoRA's frozen FP8 base: ZeRO 0 to 2)",
     fp8_params_need_distributed_optimizer},
    {"fp16-at-bf16-rate", "FP16 on a GPU whose FP16 peak is its BF16 one", fp16_at_bf16_rate},
};

}  // namespace

std::span<const JobRule> job_rules() {
  return kRules;
}

std::vector<JobProblem> job_problems(const JobSubject& subject, const ParallelPlan& plan) {
  std::vector<JobProblem> problems;
  for (const JobRule& rule : kRules) {
    Problem problem = rule.check(subject, plan);
    if (!problem) continue;
    problem->rule = rule.name;
    problems.push_back(std::move(*problem));
    // The other rules divide by the sizes: they hold only once every size is positive.
    if (rule.check == positive_sizes) break;
  }
  return problems;
}

std::optional<JobProblem> first_job_problem(const JobSubject& subject, const ParallelPlan& plan) {
  // positive-sizes comes before every rule that divides by a size: none runs when it fails.
  for (const JobRule& rule : kRules) {
    if (Problem problem = rule.check(subject, plan)) {
      problem->rule = rule.name;
      return problem;
    }
  }
  return std::nullopt;
}

std::optional<JobProblem> first_job_problem_at(std::string_view field, const JobSubject& subject,
                                               const ParallelPlan& plan) {
  for (JobProblem& problem : job_problems(subject, plan)) {
    if (problem.fields.front() == field) return std::move(problem);
  }
  return std::nullopt;
}

}  // namespace fleetsim
