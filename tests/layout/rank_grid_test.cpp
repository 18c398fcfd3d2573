#include <catch2/catch.hpp>
#include <set>
#include <vector>

#include "sim/engine/errors.hpp"
#include "workloads/layout/rank_grid.hpp"

using namespace fleetsim;

namespace {

constexpr GroupKind kKinds[] = {GroupKind::tensor, GroupKind::context,     GroupKind::data,
                                GroupKind::expert, GroupKind::expert_data, GroupKind::pipeline};

}  // namespace

TEST_CASE("ranks are numbered tp innermost, then cp, then dp, then the stage (Megatron's order)") {
  // rank = ((stage x dp + dp_rank) x cp + cp_rank) x tp + tp_rank, replica = dp_rank x cp +
  // cp_rank: with tp 2, cp 2, dp 3, pp 2 a stage has 12 ranks, and stage 1, dp rank 2, cp rank
  // 1, tp rank 1 is ((1 x 3 + 2) x 2 + 1) x 2 + 1 = 23, replica 5.
  const RankGrid grid(2, 2, 3, 2);
  CHECK(grid.ranks() == 24);
  CHECK(grid.stage_ranks() == 12);
  CHECK(grid.replicas() == 6);
  CHECK(grid.rank_at(1, 5, 1) == 23);
  CHECK(grid.stage_of(23) == 1);
  CHECK(grid.replica_of(23) == 5);
  CHECK(grid.tp_rank_of(23) == 1);
  for (int r = 0; r < grid.ranks(); ++r) {
    CHECK(grid.rank_at(grid.stage_of(r), grid.replica_of(r), grid.tp_rank_of(r)) == r);
    CHECK(grid.in_replica(r, 0) == grid.rank_at(grid.stage_of(r), 0, grid.tp_rank_of(r)));
    CHECK(grid.in_stage(r, 0) == grid.rank_at(0, grid.replica_of(r), grid.tp_rank_of(r)));
  }
}

TEST_CASE("the groups of each kind partition the ranks, each group listed as group_of finds it") {
  for (const RankGrid& grid : {RankGrid(2, 2, 3, 2), RankGrid(1, 1, 8, 2, 4), RankGrid(4, 1, 2, 3),
                               RankGrid(1, 4, 2, 1), RankGrid(8, 1, 1, 1), RankGrid(2, 2, 4, 2, 4),
                               RankGrid(2, 2, 4, 2, 8, 1), RankGrid(4, 1, 4, 2, 2, 1)}) {
    for (const GroupKind kind : kKinds) {
      INFO(to_string(kind) << " of tp " << grid.tp() << " cp " << grid.cp() << " dp " << grid.dp()
                           << " pp " << grid.pp() << " ep " << grid.ep() << " etp " << grid.etp());
      std::multiset<int> seen;
      for (int g = 0; g < grid.groups(kind); ++g) {
        const std::vector<int> members = grid.members(kind, g);
        REQUIRE(static_cast<int>(members.size()) == grid.group_size(kind));
        for (std::size_t i = 0; i < members.size(); ++i) {
          if (i > 0) CHECK(members[i - 1] < members[i]);
          CHECK(grid.group_of(members[i], kind) == g);
          seen.insert(members[i]);
        }
      }
      // Every rank in exactly one group of the kind.
      REQUIRE(static_cast<int>(seen.size()) == grid.ranks());
      for (int r = 0; r < grid.ranks(); ++r) CHECK(seen.count(r) == 1);
    }
  }
}

TEST_CASE("the members of each group kind, derived by hand") {
  // tp 2, cp 2, dp 2: replicas 0..3 are (dp 0, cp 0), (dp 0, cp 1), (dp 1, cp 0), (dp 1, cp 1).
  const RankGrid grid(2, 2, 2, 1);
  CHECK(grid.members(GroupKind::tensor, grid.group_of(5, GroupKind::tensor)) ==
        std::vector<int>{4, 5});
  // Rank 0's context group: the cp ranks of its dp rank, same tp rank: replicas 0 and 1.
  CHECK(grid.members(GroupKind::context, grid.group_of(0, GroupKind::context)) ==
        std::vector<int>{0, 2});
  CHECK(grid.members(GroupKind::context, grid.group_of(5, GroupKind::context)) ==
        std::vector<int>{5, 7});
  // Its data group: every replica, the ranks that hold the same parameters (dp x cp).
  CHECK(grid.members(GroupKind::data, grid.group_of(0, GroupKind::data)) ==
        std::vector<int>{0, 2, 4, 6});

  // ep 4 over 8 replicas of tp 1: expert groups of 4 consecutive replicas, an expert's data
  // group the replicas with the same index modulo 4.
  const RankGrid experts(1, 1, 8, 1, 4);
  CHECK(experts.members(GroupKind::expert, 1) == std::vector<int>{4, 5, 6, 7});
  CHECK(experts.members(GroupKind::expert_data, experts.group_of(6, GroupKind::expert_data)) ==
        std::vector<int>{2, 6});
  // Under tensor parallelism each tp rank's replicas form their own expert groups: Megatron-
  // Core's expert RankGenerator (parallel_state.py, order tp-cp-ep-dp-pp, expert tp = tp)
  // numbers a stage's rank etp_rank + tp (ep_rank + ep edp_rank), so with tp 2, cp 2, dp 4 and
  // ep 4 rank 3's expert group is ranks 1, 3, 5, 7 (ep spanning the cp ranks too) and its
  // expert-data group 3, 11.
  const RankGrid expert_tp(2, 2, 4, 1, 4);
  CHECK(expert_tp.members(GroupKind::expert, expert_tp.group_of(3, GroupKind::expert)) ==
        std::vector<int>{1, 3, 5, 7});
  CHECK(expert_tp.members(GroupKind::expert_data, expert_tp.group_of(3, GroupKind::expert_data)) ==
        std::vector<int>{3, 11});
  // With each expert whole (etp 1) the generator numbers a stage's rank ep_rank + ep edp_rank:
  // tp 2, dp 8, ep 8 makes ranks 0-7 and 8-15 the expert groups, and rank 3's expert-data
  // group 3, 11 (Megatron-Core's ETP 1 layout of tp 2, dp 8, ep 8 on 16 GPUs).
  const RankGrid whole(2, 1, 8, 1, 8, 1);
  CHECK(whole.members(GroupKind::expert, whole.group_of(3, GroupKind::expert)) ==
        std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(whole.members(GroupKind::expert_data, whole.group_of(3, GroupKind::expert_data)) ==
        std::vector<int>{3, 11});
  CHECK(whole.expert_replicas() == 4);
  // ep 2 under tp 4: each replica's 4 ranks are two expert groups.
  const RankGrid halves(4, 1, 2, 1, 2, 1);
  CHECK(halves.members(GroupKind::expert, halves.group_of(6, GroupKind::expert)) ==
        std::vector<int>{6, 7});
  CHECK(halves.members(GroupKind::expert_data, halves.group_of(6, GroupKind::expert_data)) ==
        std::vector<int>{0, 2, 4, 6});
  CHECK(halves.expert_replicas() == 1);

  // A pipeline group: one position in every stage (tp 2, dp 2: 4 ranks a stage).
  const RankGrid pipeline(2, 1, 2, 3);
  CHECK(pipeline.members(GroupKind::pipeline, pipeline.group_of(9, GroupKind::pipeline)) ==
        std::vector<int>{1, 5, 9});
}

TEST_CASE("the representatives a folded replay runs are replica 0 of each stage") {
  const RankGrid grid(2, 1, 4, 2);
  std::vector<int> representatives;
  for (int r = 0; r < grid.ranks(); ++r) {
    if (grid.representative(r)) representatives.push_back(r);
  }
  // tp 2 ranks of replica 0 in each of the two stages of 8 ranks.
  CHECK(representatives == std::vector<int>{0, 1, 8, 9});
}

TEST_CASE("representative_groups counts the groups of a stage that hold a representative") {
  // tp 2 and two stages of 8 replicas: cp 2 x dp 4, or dp 8 with ep 4.
  // With each expert whole: expert groups of 4 ranks (tp 2 x 2 replicas) or 2 (half of tp 4).
  for (const RankGrid& grid : {RankGrid(2, 2, 4, 2), RankGrid(2, 1, 8, 2, 4),
                               RankGrid(2, 1, 8, 2, 4, 1), RankGrid(4, 1, 4, 2, 2, 1)}) {
    for (const GroupKind kind : {GroupKind::tensor, GroupKind::context, GroupKind::data,
                                 GroupKind::expert, GroupKind::expert_data}) {
      if (!grid.has_groups(kind)) continue;
      CAPTURE(to_string(kind), grid.cp(), grid.ep());
      std::set<int> holding;
      for (int r = 0; r < grid.stage_ranks(); ++r) {
        if (grid.representative(r)) holding.insert(grid.group_of(r, kind));
      }
      CHECK(static_cast<int>(holding.size()) == grid.representative_groups(kind));
      CHECK(grid.groups_per_stage(kind) % grid.representative_groups(kind) == 0);
    }
  }
}

TEST_CASE("a grid needs positive sizes and expert groups that divide the replicas") {
  CHECK_THROWS_AS(RankGrid(0, 1, 1, 1), ModelError);
  CHECK_THROWS_AS(RankGrid(1, 1, 6, 1, 4), ModelError);
  CHECK_NOTHROW(RankGrid(1, 1, 8, 1, 4));
  // Each expert whole: ep over the stage's ranks, dividing tp or a multiple of it.
  CHECK_NOTHROW(RankGrid(2, 1, 2, 1, 4, 1));
  CHECK_THROWS_AS(RankGrid(4, 1, 3, 1, 6, 1), ModelError);  // 6 neither divides 4 nor is 4 k
  CHECK_THROWS_AS(RankGrid(4, 1, 2, 1, 2, 2), ModelError);  // etp neither tp nor 1
}
