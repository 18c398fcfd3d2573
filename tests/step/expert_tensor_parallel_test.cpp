// Expert parallelism under tensor parallelism, as a step replays it: the all-to-all
// dispatcher's traffic with each expert split over tp or whole (expert_tp 1), and folding.
#include <catch2/catch.hpp>
#include <string>
#include <tuple>

#include "common/memory_items.hpp"
#include "common/small_job.hpp"
#include "sim/step/step_executor.hpp"
#include "workloads/transformer_ops.hpp"

using namespace fleetsim;

namespace {

double memory_item(const StepOutcome& out, const std::string& name) {
  return fleetsim::testing::memory_item(out.memory, name);
}

// The small mixture of experts on 8 GPUs as tp 2 x dp 4, one micro-batch of 2 x 2,048 tokens
// per replica, with ep `ep`.
StepInputs experts_over_tp_pairs(int ep) {
  StepInputs in = testing::with_experts(testing::small_job());
  in.plan.tp = 2;
  in.plan.dp = 4;
  in.plan.ep = ep;
  in.training.global_batch = 8;
  return in;
}

}  // namespace

TEST_CASE("expert parallelism under tp: the tp pair gathers what the all-to-alls bring") {
  // The small mixture of experts on 8 GPUs as tp 2 x dp 4, one micro-batch of 2 x 2,048 tokens
  // per replica, so each rank routes its 2,048-token sequence shard. Against ep 1 under the
  // allgather dispatcher, ep 4 under all-to-all, per layer and GPU: the four all-to-alls
  // (dispatch and combine, each way) carry k = 2 copies of the rank's 2,048 tokens, 3/4 of it
  // to other ranks; the tp pair's four gathers and reduce-scatters of what arrives carry the k
  // copies of all 4,096 tokens, half of it each way, where the block's own four carried the
  // 4,096 tokens once. Each rank's experts (its 2 of 8, split over tp) are held by no other
  // replica, so ZeRO 1's reduce-scatter and gather of the experts' BF16 gradients and weights
  // over 4 replicas (2 x 2 bytes x 3/4 of experts / tp) go.
  StepInputs gathered = experts_over_tp_pairs(1);
  gathered.training.token_dispatcher = TokenDispatcher::allgather;
  const StepInputs in = experts_over_tp_pairs(4);
  const double h = in.model.hidden;
  const double experts = in.model.layers * layer_expert_parameters(in.model);
  const StepOutcome before = simulate_step(gathered);
  const StepOutcome after = simulate_step(in);
  REQUIRE(before.simulated);
  REQUIRE(after.simulated);
  const double all_to_all = 4 * 3.0 / 4 * (2 * 2048 * h * 2);
  const double dispatch_tp = 4 * 1.0 / 2 * (2 * 4096 * h * 2);
  const double block_tp = 4 * 1.0 / 2 * (4096 * h * 2);
  const double expert_dp = 2 * 2 * 3.0 / 4 * experts / 2;
  CHECK(after.step.comm_bytes_per_gpu - before.step.comm_bytes_per_gpu ==
        Approx(in.model.layers * (all_to_all + dispatch_tp - block_tp) - expert_dp).epsilon(1e-9));
}

TEST_CASE("each expert whole (expert_tp 1): nothing gathered over tp, experts reduced in pairs") {
  // The job above, tp 2 x dp 4 and ep 4, with each expert whole on its rank: expert groups of
  // 4 consecutive ranks (2 replicas' tp pairs), each rank holding 2 of the 8 experts whole, as
  // one other rank does. Against experts split over tp, per layer and GPU the dispatcher's four
  // tp gathers and reduce-scatters (half of k x 4,096 x h BF16 each) go; ZeRO 1 now reduces and
  // gathers the experts' BF16 gradients and weights over 2 ranks, half of experts / 4 each way.
  StepInputs in = experts_over_tp_pairs(4);
  const double h = in.model.hidden;
  const double experts = in.model.layers * layer_expert_parameters(in.model);
  const StepOutcome split = simulate_step(in);
  in.plan.expert_tp = 1;
  const StepOutcome whole = simulate_step(in);
  REQUIRE(split.simulated);
  REQUIRE(whole.simulated);
  const double dispatch_tp = 4 * 1.0 / 2 * (2 * 4096 * h * 2);
  const double expert_dp = 2 * 2 * 1.0 / 2 * experts / 4;
  CHECK(whole.step.comm_bytes_per_gpu - split.step.comm_bytes_per_gpu ==
        Approx(expert_dp - in.model.layers * dispatch_tp).epsilon(1e-9));
  CHECK(memory_item(whole, "weights") - memory_item(split, "weights") ==
        Approx(2 * (experts / 4 - experts / 4 / 2)));
  // ZeRO 1's optimizer states: experts / (tp x dp x cp) a rank either way.
  CHECK(memory_item(whole, "optimizer states") == Approx(memory_item(split, "optimizer states")));
  // Folded (replica 0's tp rank 0, the groups it is in whole beside it) as unfolded:
  // experts split over the tp pair, or whole: an expert group of two replicas' pairs, or (tp
  // 4, ep 2) two groups inside each replica, replica 0's two ranks in each of the expert_data
  // groups of 4, and a pipeline of two.
  for (const auto& [tp, ep, pp, expert_tp] : {std::tuple{2, 4, 1, 0}, std::tuple{2, 4, 1, 1},
                                              std::tuple{4, 2, 1, 1}, std::tuple{2, 2, 2, 1}}) {
    INFO("tp " << tp << ", ep " << ep << ", pp " << pp << ", expert_tp " << expert_tp);
    StepInputs layout = in;
    layout.plan.expert_tp = expert_tp;
    layout.plan.tp = tp;
    layout.plan.pp = pp;
    layout.plan.dp = 8 / tp / pp;
    layout.plan.ep = ep;
    layout.training.global_batch = 4 * layout.plan.dp;
    StepOptions every_rank;
    every_rank.fold = false;
    const StepOutcome folded = simulate_step(layout);
    const StepOutcome unfolded = simulate_step(layout, every_rank);
    REQUIRE(folded.simulated);
    CHECK(folded.step.replayed_ranks == pp);  // its tp ranks sit alike in the node
    CHECK(unfolded.step.replayed_ranks == 8);
    CHECK(unfolded.step.step_time_s == Approx(folded.step.step_time_s).epsilon(1e-9));
    CHECK(unfolded.step.comm_bytes_per_gpu == Approx(folded.step.comm_bytes_per_gpu));
  }
}
