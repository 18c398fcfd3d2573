#include "workloads/layout/dimensions.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <string>

#include "topology/node_spec.hpp"
#include "workloads/layout/rules.hpp"

namespace fleetsim {
namespace {

// The accessors of the table's rows: a count, a flag, or a size stored as a member.
template <int ParallelPlan::*member>
DimensionValue get_count(const ParallelPlan& plan) {
  return plan.*member;
}
template <int ParallelPlan::*member>
void set_count(ParallelPlan& plan, const DimensionValue& value) {
  plan.*member = std::get<int>(value);
}
template <bool ParallelPlan::*member>
DimensionValue get_flag(const ParallelPlan& plan) {
  return plan.*member;
}
template <bool ParallelPlan::*member>
void set_flag(ParallelPlan& plan, const DimensionValue& value) {
  plan.*member = std::get<bool>(value);
}
// "tp8" when the count is above 1.
template <int ParallelPlan::*member, const char* prefix>
std::string count_above_one(const ParallelPlan& plan) {
  return plan.*member > 1 ? prefix + std::to_string(plan.*member) : std::string();
}
template <bool ParallelPlan::*member, const char* words>
std::string flag_words(const ParallelPlan& plan) {
  return plan.*member ? std::string(words) : std::string();
}
std::string nothing(const ParallelPlan&) {
  return {};
}
// "grad-reduce-after" for gradients reduced after the backward.
std::string exposed_gradient_reduction(const ParallelPlan& plan) {
  return plan.overlap_grad_reduce ? "" : "grad-reduce-after";
}
// "no-sp" for tensor parallelism without sequence parallelism.
std::string without_sequence_parallelism(const ParallelPlan& plan) {
  return plan.tp > 1 && !plan.sequence_parallel ? "no-sp" : "";
}

// ---- What the planner tries (LayoutDimension::candidates) ----------------------------------

constexpr int kMaxVirtualStages = 8;

std::vector<int> divisors(int n) {
  std::vector<int> found;
  for (int d = 1; d <= n; ++d) {
    if (n % d == 0) found.push_back(d);
  }
  return found;
}

std::vector<DimensionValue> values_of(const std::vector<int>& counts) {
  return {counts.begin(), counts.end()};
}

// Powers of two inside a node, or across whole nodes of an NVLink domain (GB200 NVL72 trays),
// that divide the GPUs.
std::vector<DimensionValue> tp_candidates(const LayoutSearch& search, const ParallelPlan&) {
  std::vector<int> sizes;
  for (int tp = 1; tp <= search.node.gpus * search.node.nvlink_domain_nodes; tp *= 2) {
    if (search.node.nvlink_group_fits(tp) && search.gpus % tp == 0) sizes.push_back(tp);
  }
  return values_of(sizes);
}

// Powers of two up to the scenario's cp (1 unless it asks for context parallelism).
std::vector<DimensionValue> cp_candidates(const LayoutSearch& search, const ParallelPlan&) {
  std::vector<int> sizes;
  for (int cp = 1; cp <= search.scenario.cp; cp *= 2) sizes.push_back(cp);
  return values_of(sizes);
}

// The layers' divisors (even stages, interleaving possible), and the powers of two that do not
// divide them (uneven stages, one fewer layer at the ends; not interleaved) and leave at least
// two layers a stage: a power-of-two cluster often has no other way to a deep pipeline. Only
// those that tp x cp x pp divide the GPUs.
std::vector<DimensionValue> pp_candidates(const LayoutSearch& search, const ParallelPlan& chosen) {
  const int layers = search.subject.layers;
  std::vector<int> sizes = divisors(layers);
  for (int pp = 2; 2 * pp <= layers; pp *= 2) {
    if (layers % pp != 0) sizes.push_back(pp);
  }
  std::sort(sizes.begin(), sizes.end());
  std::erase_if(sizes, [&](int pp) { return search.gpus % (chosen.tp * chosen.cp * pp) != 0; });
  return values_of(sizes);
}

// 1, and with an even pipeline each divisor of a stage's layers up to 8.
std::vector<DimensionValue> vpp_candidates(const LayoutSearch& search, const ParallelPlan& chosen) {
  std::vector<int> stages{1};
  const int layers = search.subject.layers;
  if (chosen.pp > 1 && layers % chosen.pp == 0) {
    for (const int v : divisors(layers / chosen.pp)) {
      if (v > 1 && v <= kMaxVirtualStages) stages.push_back(v);
    }
  }
  return values_of(stages);
}

// What the GPUs leave to tp x cp x pp.
std::vector<DimensionValue> dp_candidates(const LayoutSearch& search, const ParallelPlan& chosen) {
  return values_of({search.gpus / (chosen.tp * chosen.cp * chosen.pp)});
}

// ZeRO shards over the ranks holding the same parameters: without any, only stage 0; with a
// pipeline, 0 to 2 (Megatron's distributed optimizer, Llama 3's FSDP sharding the gradients);
// without one, 0 to 3.
std::vector<DimensionValue> zero_candidates(const LayoutSearch&, const ParallelPlan& chosen) {
  const int highest = chosen.gradient_ranks() == 1 ? 0 : chosen.pp > 1 ? 2 : 3;
  std::vector<int> stages;
  for (int zero = 0; zero <= highest; ++zero) stages.push_back(zero);
  return values_of(stages);
}

// The scenario's expert_tp 1 where the layout allows it (ZeRO 0-2), else tp.
int searched_expert_tp(const LayoutSearch& search, const ParallelPlan& chosen) {
  return search.scenario.expert_tp == 1 && chosen.zero_stage < 3 ? 1 : 0;
}

// 1, and every power of two up to dp (tp x dp with each expert whole) that the job rules allow
// at layout.ep (tp, dp and ZeRO chosen; the overlaps and offload, searched after it, still
// off). Not modelled with context parallelism.
std::vector<DimensionValue> ep_candidates(const LayoutSearch& search, const ParallelPlan& chosen) {
  std::vector<int> sizes{1};
  ParallelPlan plan = chosen;
  plan.expert_tp = searched_expert_tp(search, chosen);
  const int most = plan.expert_tp == 1 ? chosen.tp * chosen.dp : chosen.dp;
  for (plan.ep = 2; chosen.cp == 1 && plan.ep <= most; plan.ep *= 2) {
    if (!first_job_problem_at("layout.ep", search.subject, plan)) sizes.push_back(plan.ep);
  }
  return values_of(sizes);
}

// The planner starts from none and takes the first that fits.
std::vector<DimensionValue> recompute_candidates(const LayoutSearch&, const ParallelPlan&) {
  return {std::string("none"), std::string("selective"), std::string("full")};
}

// Megatron-Core's default: the attention core alone.
std::vector<DimensionValue> default_recompute_modules(const LayoutSearch&, const ParallelPlan&) {
  return {to_string(RecomputeModules{})};
}

std::vector<DimensionValue> one_f_one_b(const LayoutSearch&, const ParallelPlan&) {
  return {std::string("1f1b")};
}

// ---- Labels and accessors ------------------------------------------------------------------

constexpr char kTp[] = "tp";
constexpr char kCp[] = "cp";
constexpr char kEp[] = "ep";
constexpr char kTpOverlap[] = "tp-overlap";
constexpr char kEpOverlap[] = "ep-overlap";
constexpr char kParamGatherOverlap[] = "param-gather-overlap";
constexpr char kFsdp2[] = "fsdp2";
constexpr char kBf16Shards[] = "bf16-shards";
constexpr char kOffload[] = "offload";

const std::array<LayoutDimension, 24> kDimensions = {{
    {.key = "tp",
     .output = "tp",
     .kind = DimensionKind::count,
     .choices = {},
     .description = "tensor-parallel ranks (Megatron's): a divisor of a node's GPUs, or whole "
                    "nodes of its NVLink domain",
     .planner = "powers of two that fit a node or whole nodes of its NVLink domain",
     .get = get_count<&ParallelPlan::tp>,
     .set = set_count<&ParallelPlan::tp>,
     .label = count_above_one<&ParallelPlan::tp, kTp>,
     .candidates = tp_candidates},
    {.key = "cp",
     .output = "cp",
     .kind = DimensionKind::count,
     .choices = {},
     .description = "context-parallel ranks: each sequence in 2 x cp chunks, attention across "
                    "them as cp_comm_type says",
     .planner = "powers of two up to the scenario's cp",
     .get = get_count<&ParallelPlan::cp>,
     .set = set_count<&ParallelPlan::cp>,
     .label = count_above_one<&ParallelPlan::cp, kCp>,
     .candidates = cp_candidates},
    {.key = "cp_comm_type",
     .output = "cp_comm_type",
     .kind = DimensionKind::choice,
     .choices = {"p2p", "a2a"},
     .description = "how attention meets the rest of the sequence under cp: p2p, the keys and "
                    "values around a ring beside the kernel; a2a (Ulysses), all-to-alls that "
                    "give each rank every token of heads / cp heads",
     .planner = "the scenario's",
     .get =
         [](const ParallelPlan& plan) {
           return DimensionValue{std::string(to_string(plan.cp_comm_type))};
         },
     .set =
         [](ParallelPlan& plan, const DimensionValue& value) {
           plan.cp_comm_type =
               std::get<std::string>(value) == "a2a" ? ContextComm::a2a : ContextComm::p2p;
         },
     .label =
         [](const ParallelPlan& plan) {
           return plan.ulysses() ? std::string("cp-a2a") : std::string();
         },
     .misnamed = {{"ulysses", "Ulysses' all-to-alls are cp_comm_type a2a", "set cp_comm_type: a2a"},
                  {"ring", "ring attention is cp_comm_type p2p", "set cp_comm_type: p2p"}},
     .candidates =
         [](const LayoutSearch& search, const ParallelPlan&) {
           return std::vector<DimensionValue>{std::string(to_string(search.scenario.cp_comm_type))};
         }},
    {.key = "pp",
     .output = "pp",
     .kind = DimensionKind::count,
     .choices = {},
     .description = "pipeline stages, the layers split over them",
     .planner = "the layers' divisors, and powers of two that leave two layers a stage",
     .get = get_count<&ParallelPlan::pp>,
     .set = set_count<&ParallelPlan::pp>,
     .label =
         [](const ParallelPlan& plan) {
           return plan.pp > 1 ? "pp" + std::to_string(plan.pp) : std::string();
         },
     .candidates = pp_candidates},
    {.key = "vpp",
     .output = "vpp",
     .kind = DimensionKind::count,
     .choices = {},
     .description = "virtual stages per pipeline rank (Megatron's interleaved 1F1B)",
     .planner = "1, and with a pipeline each divisor of a stage's layers up to 8",
     .get = get_count<&ParallelPlan::vpp>,
     .set = set_count<&ParallelPlan::vpp>,
     .label =
         [](const ParallelPlan& plan) {
           return plan.pp > 1 && plan.vpp > 1 ? "vpp" + std::to_string(plan.vpp) : std::string();
         },
     .candidates = vpp_candidates},
    {.key = "microbatch_group",
     .output = "microbatch_group",
     .kind = DimensionKind::count,
     .choices = {},
     .description = "with vpp > 1, the micro-batches each chunk runs in a row before the next "
                    "chunk's (Megatron-Core's microbatch_group_size_per_vp_stage): the "
                    "warm-up, and so the passes a stage holds, grows by vpp - 1 for each one "
                    "above pp; between pp and the step's micro-batches; 0, the default: pp",
     .planner = "0 (pp, Megatron's default)",
     .get = get_count<&ParallelPlan::microbatch_group>,
     .set = set_count<&ParallelPlan::microbatch_group>,
     .label =
         [](const ParallelPlan& plan) {
           return plan.vpp > 1 && plan.microbatch_group > 0
                      ? "microbatch-group=" + std::to_string(plan.microbatch_group)
                      : std::string();
         },
     .minimum = 0,
     .candidates = [](const LayoutSearch&,
                      const ParallelPlan&) { return std::vector<DimensionValue>{0}; }},
    {.key = "schedule",
     .output = "pipeline_schedule",
     .kind = DimensionKind::choice,
     .choices = {"1f1b", "gpipe"},
     .description = "the pipeline's order of micro-batches: 1F1B (PipeDream-Flush) or GPipe",
     .planner = "1f1b",
     .get =
         [](const ParallelPlan& plan) {
           return DimensionValue{std::string(to_string(plan.schedule))};
         },
     .set =
         [](ParallelPlan& plan, const DimensionValue& value) {
           plan.schedule = std::get<std::string>(value) == "gpipe" ? PipelineSchedule::gpipe
                                                                   : PipelineSchedule::one_f_one_b;
         },
     .label =
         [](const ParallelPlan& plan) {
           return plan.pp > 1 && plan.vpp == 1 ? std::string(to_string(plan.schedule))
                                               : std::string();
         },
     .misnamed = {{"interleaved", "interleaving is set by vpp, not by the schedule",
                   "set schedule: 1f1b and vpp: 2 or more virtual stages per rank"}},
     .candidates = one_f_one_b},
    {.key = "dp",
     .output = "dp",
     .kind = DimensionKind::count,
     .choices = {},
     .description = "data-parallel replicas; auto: what the GPUs leave to tp x cp x pp",
     .planner = "what the GPUs leave",
     .get = get_count<&ParallelPlan::dp>,
     .set = set_count<&ParallelPlan::dp>,
     .label = [](const ParallelPlan& plan) { return "dp" + std::to_string(plan.dp); },
     .required = true,
     .automatic = true,
     .candidates = dp_candidates},
    {.key = "ep",
     .output = "ep",
     .kind = DimensionKind::count,
     .choices = {},
     .description = "expert-parallel ranks of a mixture of experts, laid over the replicas "
                    "(or with expert_tp 1 over a stage's ranks)",
     .planner = "1, and each power of two up to dp (tp x dp with expert_tp 1) that the rules "
                "allow",
     .get = get_count<&ParallelPlan::ep>,
     .set = set_count<&ParallelPlan::ep>,
     .label = count_above_one<&ParallelPlan::ep, kEp>,
     .candidates = ep_candidates},
    {.key = "expert_tp",
     .output = "expert_tp",
     .kind = DimensionKind::count,
     .choices = {},
     .description = "with ep > 1, the ranks each expert splits over (Megatron-Core's "
                    "expert_tensor_parallel_size): 1 keeps each expert whole, its expert group "
                    "ep consecutive ranks, each rank dispatching its own sequence shard; 0, the "
                    "default: tp",
     .planner = "the scenario's 1, with ep > 1 and ZeRO 0-2; else tp",
     .get = get_count<&ParallelPlan::expert_tp>,
     .set = set_count<&ParallelPlan::expert_tp>,
     .label =
         [](const ParallelPlan& plan) {
           return plan.ep > 1 && plan.experts_split() != plan.tp
                      ? "etp" + std::to_string(plan.experts_split())
                      : std::string();
         },
     .minimum = 0,
     .candidates =
         [](const LayoutSearch& search, const ParallelPlan& chosen) {
           return std::vector<DimensionValue>{chosen.ep > 1 ? searched_expert_tp(search, chosen)
                                                            : 0};
         }},
    {.key = "zero",
     .output = "zero_stage",
     .kind = DimensionKind::choice,
     .choices = {"0", "1", "2", "3"},
     .description = "ZeRO stage: 1 shards optimizer states, 2 gradients too, 3 parameters too "
                    "(FSDP)",
     .planner = "0-3 without a pipeline, 0-2 with one, 0 without replicas",
     .get = [](const ParallelPlan& plan) { return DimensionValue{plan.zero_stage}; },
     .set =
         [](ParallelPlan& plan, const DimensionValue& value) {
           const auto* stage = std::get_if<int>(&value);
           plan.zero_stage = stage ? *stage : std::get<std::string>(value).front() - '0';
         },
     .label = [](const ParallelPlan& plan) { return "zero" + std::to_string(plan.zero_stage); },
     .candidates = zero_candidates},
    {.key = "recompute",
     .output = "recompute",
     .kind = DimensionKind::choice,
     .choices = {"none", "selective", "per_op", "full"},
     .description = "activation recomputation: none, the attention core (selective), "
                    "torchtitan's per-op policy (per_op: every second matmul of a layer and "
                    "its elementwise ops), or each layer's forward (full; see "
                    "recompute_layers)",
     .planner = "the least of none, selective and full that fits",
     .get =
         [](const ParallelPlan& plan) {
           return DimensionValue{std::string(to_string(plan.recompute))};
         },
     .set =
         [](ParallelPlan& plan, const DimensionValue& value) {
           const std::string& mode = std::get<std::string>(value);
           plan.recompute = mode == "full"        ? Recompute::full
                            : mode == "selective" ? Recompute::selective
                            : mode == "per_op"    ? Recompute::per_op
                                                  : Recompute::none;
         },
     .label =
         [](const ParallelPlan& plan) {
           return std::string("recompute=") + to_string(plan.recompute);
         },
     .candidates = recompute_candidates},
    {.key = "recompute_layers",
     .output = "recompute_layers",
     .kind = DimensionKind::count,
     .choices = {},
     .description = "with recompute: full, only the first N layers of each chunk recomputed, "
                    "the others keeping their activations (Megatron's recompute_method block, "
                    "recompute_num_layers); 0, the default: every layer",
     .planner = "where full recomputation fits, the fewest layers of each chunk that fit, 0 "
                "where only every layer does",
     .get = get_count<&ParallelPlan::recompute_layers>,
     .set = set_count<&ParallelPlan::recompute_layers>,
     .label =
         [](const ParallelPlan& plan) {
           return plan.recompute == Recompute::full && plan.recompute_layers > 0
                      ? "recompute-layers=" + std::to_string(plan.recompute_layers)
                      : std::string();
         },
     .minimum = 0,
     .candidates = [](const LayoutSearch&,
                      const ParallelPlan&) { return std::vector<DimensionValue>{0}; }},
    {.key = "recompute_modules",
     .output = "recompute_modules",
     .kind = DimensionKind::names,
     .choices = {"core_attn", "moe_act", "layernorm", "mlp", "moe"},
     .description = "with recompute: selective, what of each layer is rerun before its "
                    "backward (Megatron-Core's recompute_modules): the attention core "
                    "(core_attn, the default), a dense MLP block (mlp), a mixture of experts' "
                    "block (moe), its experts' activation (moe_act) or the norm before it "
                    "(layernorm); results write the names as one string, \"core_attn, mlp\"",
     .planner = "Megatron-Core's default, core_attn",
     .get =
         [](const ParallelPlan& plan) { return DimensionValue{to_string(plan.recompute_modules)}; },
     .set =
         [](ParallelPlan& plan, const DimensionValue& value) {
           const std::string& names = std::get<std::string>(value);
           // Every module is in the table: each is set, named or not.
           for (const auto& [name, member] : kRecomputeModuleNames) {
             // Whole names between ", " separators: "moe" is not found in "moe_act".
             const std::string text = ", " + names + ", ";
             plan.recompute_modules.*member =
                 text.find(", " + std::string(name) + ", ") != std::string::npos;
           }
         },
     .label =
         [](const ParallelPlan& plan) {
           if (plan.recompute_modules == RecomputeModules{}) return std::string();
           std::string words = "recompute-modules=" + to_string(plan.recompute_modules);
           std::replace(words.begin(), words.end(), ',', '+');
           words.erase(std::remove(words.begin(), words.end(), ' '), words.end());
           return words;
         },
     .candidates = default_recompute_modules},
    {.key = "activation_offload_layers",
     .output = "activation_offload_layers",
     .kind = DimensionKind::count,
     .choices = {},
     .description = "the first N decoder layers' saved activations copied to host memory "
                    "between their forward and backward (Transformer Engine's CPU offloading, "
                    "Megatron-Core's cpu_offloading_num_layers); 0, the default: none",
     .planner = "where a one-stage layout does not fit without recomputation, also the fewest "
                "layers offloaded that fit, replayed beside the recomputed layout",
     .get = get_count<&ParallelPlan::activation_offload_layers>,
     .set = set_count<&ParallelPlan::activation_offload_layers>,
     .label =
         [](const ParallelPlan& plan) {
           return plan.activation_offload_layers > 0
                      ? "offload-layers=" + std::to_string(plan.activation_offload_layers)
                      : std::string();
         },
     .minimum = 0,
     .candidates = [](const LayoutSearch&,
                      const ParallelPlan&) { return std::vector<DimensionValue>{0}; }},
    {.key = "sequence_parallel",
     .output = "sequence_parallel",
     .kind = DimensionKind::flag,
     .choices = {},
     .description = "tensor parallelism shards the activations between blocks by sequence "
                    "(all-gather and reduce-scatter); false: Megatron's older form, the norms "
                    "and residuals on the whole sequence on every rank and an all-reduce per "
                    "block",
     .planner = "the scenario's, wherever tp > 1",
     .get = get_flag<&ParallelPlan::sequence_parallel>,
     .set = set_flag<&ParallelPlan::sequence_parallel>,
     .label = without_sequence_parallelism,
     .candidates =
         [](const LayoutSearch& search, const ParallelPlan& chosen) {
           return std::vector<DimensionValue>{search.scenario.sequence_parallel || chosen.tp == 1};
         }},
    {.key = "tp_comm_overlap",
     .output = "tp_comm_overlap",
     .kind = DimensionKind::flag,
     .choices = {},
     .description = "tensor-parallel collectives beside their GEMMs: with sequence "
                    "parallelism Transformer Engine's userbuffers, without it Megatron's "
                    "asynchronous all-reduce of input gradients beside the weight gradients",
     .planner = "the scenario's, wherever tp > 1",
     .get = get_flag<&ParallelPlan::tp_comm_overlap>,
     .set = set_flag<&ParallelPlan::tp_comm_overlap>,
     .label = flag_words<&ParallelPlan::tp_comm_overlap, kTpOverlap>,
     .candidates =
         [](const LayoutSearch& search, const ParallelPlan& chosen) {
           return std::vector<DimensionValue>{search.scenario.tp_comm_overlap && chosen.tp > 1};
         }},
    {.key = "ep_comm_overlap",
     .output = "ep_comm_overlap",
     .kind = DimensionKind::flag,
     .choices = {},
     .description = "expert-parallel all-to-alls beside another micro-batch's compute: each "
                    "forward merged with the backward after it, layer by layer (Megatron-Core's "
                    "overlap_moe_expert_parallel_comm); pp 1 or interleaved, no full "
                    "recomputation",
     .planner = "on and off, where the scenario's is on and the layout's rules allow it (then "
                "without full recomputation)",
     .get = get_flag<&ParallelPlan::ep_comm_overlap>,
     .set = set_flag<&ParallelPlan::ep_comm_overlap>,
     .label = flag_words<&ParallelPlan::ep_comm_overlap, kEpOverlap>,
     .candidates =
         [](const LayoutSearch& search, const ParallelPlan& chosen) {
           // Off too: it holds a layer's activations more and rules out full recomputation,
           // so a layout may fit, or fit faster, without it.
           if (!search.scenario.ep_comm_overlap) return std::vector<DimensionValue>{false};
           ParallelPlan overlapped = chosen;
           overlapped.ep_comm_overlap = true;
           for (const JobProblem& problem : job_problems(search.subject, overlapped)) {
             if (problem.rule == kEpCommOverlapRule) return std::vector<DimensionValue>{false};
           }
           return std::vector<DimensionValue>{true, false};
         }},
    {.key = "overlap_grad_reduce",
     .output = "overlap_grad_reduce",
     .kind = DimensionKind::flag,
     .choices = {},
     .description = "data-parallel gradient buckets reduced beside the backward; false: after "
                    "the whole backward (Megatron-LM's local DDP, DeepSpeed's pipeline engine; "
                    "ZeRO 0 and 1)",
     .planner = "the scenario's, wherever ZeRO is 0 or 1",
     .get = get_flag<&ParallelPlan::overlap_grad_reduce>,
     .set = set_flag<&ParallelPlan::overlap_grad_reduce>,
     .label = exposed_gradient_reduction,
     .candidates =
         [](const LayoutSearch& search, const ParallelPlan& chosen) {
           return std::vector<DimensionValue>{search.scenario.overlap_grad_reduce ||
                                              chosen.zero_stage > 1};
         }},
    {.key = "overlap_param_gather",
     .output = "overlap_param_gather",
     .kind = DimensionKind::flag,
     .choices = {},
     .description = "the updated parameters gathered during the next forward (ZeRO 1 and 2)",
     .planner = "the scenario's, wherever ZeRO is 1 or 2 and gradients are reduced beside the "
                "backward",
     .get = get_flag<&ParallelPlan::overlap_param_gather>,
     .set = set_flag<&ParallelPlan::overlap_param_gather>,
     .label = flag_words<&ParallelPlan::overlap_param_gather, kParamGatherOverlap>,
     .candidates =
         [](const LayoutSearch& search, const ParallelPlan& chosen) {
           return std::vector<DimensionValue>{search.scenario.overlap_param_gather &&
                                              (chosen.zero_stage == 1 || chosen.zero_stage == 2) &&
                                              chosen.overlap_grad_reduce};
         }},
    {.key = "fsdp2",
     .output = "fsdp2",
     .kind = DimensionKind::flag,
     .choices = {},
     .description = "ZeRO 3 as PyTorch's fully_shard runs it: parameters sharded one by one, "
                    "copied out of each all-gather and into each reduce-scatter on the compute "
                    "stream; under a pipeline (PyTorch's pipelining, as torchtitan runs it) "
                    "each unit gathered once for the step and its gradients reduced once the "
                    "stage's last backward is done, those copies left out",
     .planner = "the scenario's, wherever ZeRO is 3",
     .get = get_flag<&ParallelPlan::fsdp2>,
     .set = set_flag<&ParallelPlan::fsdp2>,
     .label = flag_words<&ParallelPlan::fsdp2, kFsdp2>,
     .candidates =
         [](const LayoutSearch& search, const ParallelPlan& chosen) {
           return std::vector<DimensionValue>{search.scenario.fsdp2 && chosen.zero_stage == 3};
         }},
    {.key = "bf16_shards",
     .output = "bf16_shards",
     .kind = DimensionKind::flag,
     .choices = {},
     .description = "ZeRO 3 keeping a BF16 copy of each weight shard beside the optimizer's "
                    "FP32 master (DeepSpeed's ZeRO-3, Megatron FSDP); false: the FP32 shard is "
                    "the parameter, cast to BF16 only as it is gathered (PyTorch's FSDP; an "
                    "offloaded optimizer or a LoRA's frozen base keeps a BF16 shard either way)",
     .planner = "the scenario's, wherever ZeRO is 3 without fsdp2",
     .get = get_flag<&ParallelPlan::bf16_shards>,
     .set = set_flag<&ParallelPlan::bf16_shards>,
     .label = flag_words<&ParallelPlan::bf16_shards, kBf16Shards>,
     .candidates =
         [](const LayoutSearch& search, const ParallelPlan& chosen) {
           return std::vector<DimensionValue>{search.scenario.bf16_shards &&
                                              chosen.zero_stage == 3 && !chosen.fsdp2};
         }},
    {.key = "offload_optimizer",
     .output = "offload_optimizer",
     .kind = DimensionKind::flag,
     .choices = {},
     .description = "optimizer states in host memory, updated by CPU Adam (ZeRO-Offload)",
     .planner = "off, and on with ZeRO 1-3 and ep 1 where the node describes its host and the "
                "optimizer is FP32 Adam",
     .get = get_flag<&ParallelPlan::offload_optimizer>,
     .set = set_flag<&ParallelPlan::offload_optimizer>,
     .label = flag_words<&ParallelPlan::offload_optimizer, kOffload>,
     .candidates =
         [](const LayoutSearch& search, const ParallelPlan& chosen) {
           std::vector<DimensionValue> choices{false};
           if (search.host_optimizer && chosen.zero_stage >= 1 && chosen.ep == 1) {
             choices.push_back(true);
           }
           return choices;
         }},
    {.key = "bucket",
     .output = "bucket_bytes",
     .kind = DimensionKind::size,
     .choices = {},
     .description = "the gradient bucket reduced at once (PyTorch DDP's 25 MB by default)",
     .planner = "the scenario's",
     .get = [](const ParallelPlan& plan) { return DimensionValue{plan.bucket_bytes}; },
     .set = [](ParallelPlan& plan,
               const DimensionValue& value) { plan.bucket_bytes = std::get<double>(value); },
     .label = nothing,
     .candidates =
         [](const LayoutSearch& search, const ParallelPlan&) {
           return std::vector<DimensionValue>{search.scenario.bucket_bytes};
         }},
}};

}  // namespace

std::span<const LayoutDimension> layout_dimensions() {
  return kDimensions;
}

const LayoutDimension* find_layout_dimension(std::string_view key) {
  for (const LayoutDimension& dimension : kDimensions) {
    if (dimension.key == key) return &dimension;
  }
  return nullptr;
}

std::string default_text(const LayoutDimension& dimension) {
  if (dimension.required) return "required";
  const DimensionValue value = dimension.get(ParallelPlan{});
  switch (dimension.kind) {
    case DimensionKind::count: return std::to_string(std::get<int>(value));
    case DimensionKind::flag: return std::get<bool>(value) ? "true" : "false";
    case DimensionKind::size: {
      char text[32];
      const auto end = std::to_chars(text, text + sizeof text, std::get<double>(value) / 1e6);
      return std::string(text, end.ptr) + "MB";
    }
    case DimensionKind::choice:
      if (const auto* number = std::get_if<int>(&value)) return std::to_string(*number);
      return std::get<std::string>(value);
    case DimensionKind::names: return "[" + std::get<std::string>(value) + "]";
  }
  return {};
}

std::string layout_label(const ParallelPlan& plan) {
  std::string label;
  for (const LayoutDimension& dimension : kDimensions) {
    const std::string words = dimension.label(plan);
    if (words.empty()) continue;
    label += (label.empty() ? "" : " ") + words;
  }
  return label;
}

int data_parallel_size_for(const ParallelPlan& plan, int gpus) {
  if (plan.dp > 0) return plan.dp;
  const std::int64_t model_ranks = size_product({plan.tp, plan.cp, plan.pp});
  if (model_ranks < 1 || model_ranks > gpus) return 0;
  return gpus % model_ranks == 0 ? static_cast<int>(gpus / model_ranks) : 0;
}

}  // namespace fleetsim
