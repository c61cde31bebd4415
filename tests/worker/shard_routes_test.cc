// Where a worker sends each shard's requests (worker/shard_routes.h): its
// own ps unless another ps lists it at a higher placement term.

#include "worker/shard_routes.h"

#include "gtest/gtest.h"

namespace pstrain {
namespace {

proto::ShardPlacement At(int shard, int64_t term) {
  proto::ShardPlacement p;
  p.set_shard(shard);
  p.set_term(term);
  return p;
}

TEST(ChooseRoutes, EveryShardGoesToItsOwnPsWhileNothingMoved) {
  // A fresh job: every ps answers, none initialised yet.
  EXPECT_EQ(ChooseRoutes(3, {{true, {}}, {true, {}}, {true, {}}}), (std::vector<int>{0, 1, 2}));
  // Initialised, each its own shard at term 0.
  EXPECT_EQ(ChooseRoutes(2, {{true, {At(0, 0)}}, {true, {At(1, 0)}}}), (std::vector<int>{0, 1}));
}

TEST(ChooseRoutes, AShardWhosePsIsAwayIsServedByItsAdopterOrNobody) {
  EXPECT_EQ(ChooseRoutes(2, {{true, {At(0, 0)}}, {false, {}}}), (std::vector<int>{0, -1}));
  EXPECT_EQ(ChooseRoutes(2, {{true, {At(0, 0), At(1, 1)}}, {false, {}}}), (std::vector<int>{0, 0}));
}

TEST(ChooseRoutes, TheAdopterWinsOverAPsThatCameBackEmptyOrStale) {
  // Restarted empty: answers, lists nothing.
  EXPECT_EQ(ChooseRoutes(2, {{true, {At(0, 0), At(1, 1)}}, {true, {}}}), (std::vector<int>{0, 0}));
  // Woke from a freeze still serving shard 1 at the old term.
  EXPECT_EQ(ChooseRoutes(2, {{true, {At(0, 0), At(1, 1)}}, {true, {At(1, 0)}}}),
            (std::vector<int>{0, 0}));
  // Given back at a newer term.
  EXPECT_EQ(ChooseRoutes(2, {{true, {At(0, 0)}}, {true, {At(1, 2)}}}), (std::vector<int>{0, 1}));
}

TEST(KeepPinnedRoutes, TheChiefsMoveHoldsUntilTheAdoptersListingArrives) {
  // ps:1 woke just after ps:0 adopted shard 1, while the chief's view of
  // ps:0 predates the adoption: the views alone send shard 1 back to ps:1.
  const std::vector<PsView> lagging = {{true, {At(0, 0)}}, {true, {At(1, 0)}}};
  std::vector<int> routes = ChooseRoutes(2, lagging);
  ASSERT_EQ(routes, (std::vector<int>{0, 1}));
  std::vector<int> pinned = {-1, 0};
  KeepPinnedRoutes(lagging, &pinned, &routes);
  EXPECT_EQ(routes, (std::vector<int>{0, 0}));
  EXPECT_EQ(pinned, (std::vector<int>{-1, 0}));
  // ps:0's listing arrives: the views agree, and the pin is done.
  const std::vector<PsView> caught_up = {{true, {At(0, 0), At(1, 1)}}, {true, {At(1, 0)}}};
  routes = ChooseRoutes(2, caught_up);
  KeepPinnedRoutes(caught_up, &pinned, &routes);
  EXPECT_EQ(routes, (std::vector<int>{0, 0}));
  EXPECT_EQ(pinned, (std::vector<int>{-1, -1}));
  // A pin to a ps that does not answer is not followed.
  pinned = {-1, 0};
  routes = ChooseRoutes(2, {{false, {}}, {true, {At(1, 0)}}});
  KeepPinnedRoutes({{false, {}}, {true, {At(1, 0)}}}, &pinned, &routes);
  EXPECT_EQ(routes, (std::vector<int>{-1, 1}));
  EXPECT_EQ(pinned, (std::vector<int>{-1, 0}));
}

TEST(FirstOutrankedRoute, AWorkerOnTheWokenPsLearnsOfTheAdoption) {
  // worker:1 routed shard 1 to ps:1, which woke still listing it at term 0,
  // while its view of ps:0 predated the adoption: nothing says otherwise yet.
  const std::vector<int> in_use = {0, 1};
  const std::vector<PsView> lagging = {{true, {At(0, 0)}}, {true, {At(1, 0)}}};
  EXPECT_EQ(FirstOutrankedRoute(in_use, ChooseRoutes(2, lagging), lagging), -1);
  // ps:0's listing of shard 1 at term 1 arrives: shard 1 is outranked.
  const std::vector<PsView> caught_up = {{true, {At(0, 0), At(1, 1)}}, {true, {At(1, 0)}}};
  EXPECT_EQ(FirstOutrankedRoute(in_use, ChooseRoutes(2, caught_up), caught_up), 1);
  // Once routed there, nothing is.
  EXPECT_EQ(FirstOutrankedRoute({0, 0}, ChooseRoutes(2, caught_up), caught_up), -1);
  // The same for a ps:1 that restarted empty: it lists nothing.
  const std::vector<PsView> restarted = {{true, {At(0, 0), At(1, 1)}}, {true, {}}};
  EXPECT_EQ(FirstOutrankedRoute(in_use, ChooseRoutes(2, restarted), restarted), 1);
  // And after the give-back: ps:1 restored at term 2, the adopter's
  // listing not yet withdrawn.
  const std::vector<PsView> given_back = {{true, {At(0, 0), At(1, 1)}}, {true, {At(1, 2)}}};
  EXPECT_EQ(FirstOutrankedRoute({0, 0}, ChooseRoutes(2, given_back), given_back), 1);
}

TEST(FirstOutrankedRoute, TheChiefsOwnMoveIsNotOutranked) {
  // The chief gave shard 1 back to ps:1 (restored at term 2) and pinned it
  // there; its view of ps:1 still shows the woken copy at term 0.
  const std::vector<PsView> lagging = {{true, {At(0, 0), At(1, 1)}}, {true, {At(1, 0)}}};
  std::vector<int> chosen = ChooseRoutes(2, lagging);
  ASSERT_EQ(chosen, (std::vector<int>{0, 0}));
  EXPECT_EQ(FirstOutrankedRoute({0, 1}, chosen, lagging), 1);  // without the pin
  std::vector<int> pinned = {-1, 1};
  KeepPinnedRoutes(lagging, &pinned, &chosen);
  EXPECT_EQ(FirstOutrankedRoute({0, 1}, chosen, lagging), -1);
  // Nor is a route to nobody, nor one the views choose nobody for, nor a
  // tie (the shard's own ps wins it).
  EXPECT_EQ(FirstOutrankedRoute({0, -1}, ChooseRoutes(2, lagging), lagging), -1);
  EXPECT_EQ(FirstOutrankedRoute({0, 1}, {0, -1}, lagging), -1);
  const std::vector<PsView> tie = {{true, {At(0, 0), At(1, 1)}}, {true, {At(1, 1)}}};
  EXPECT_EQ(FirstOutrankedRoute({0, 1}, ChooseRoutes(2, tie), tie), -1);
}

TEST(ChooseRoutes, ATieGoesToTheShardsOwnPsAndNonsenseIsIgnored) {
  EXPECT_EQ(ChooseRoutes(2, {{true, {At(0, 0), At(1, 3)}}, {true, {At(1, 3)}}}),
            (std::vector<int>{0, 1}));
  // Shards out of range, and what an unanswered ps once said, count for nothing.
  EXPECT_EQ(ChooseRoutes(2, {{true, {At(7, 9), At(-1, 9)}}, {false, {At(0, 9)}}}),
            (std::vector<int>{0, -1}));
}

}  // namespace
}  // namespace pstrain
