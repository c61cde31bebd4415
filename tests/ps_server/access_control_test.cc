// AccessControl: who sent a request to a ps, and whether it may make it.

#include "ps_server/access_control.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pstrain {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kJob = 0xAB;

proto::Header Request(proto::MessageType type, int rank, proto::TaskType sender = proto::WORKER) {
  proto::Header h;
  h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  h.set_job_id(kJob);
  h.set_type(type);
  h.set_rank(rank);
  h.mutable_sender()->set_type(sender);
  return h;
}

AccessControl Secure() {
  AccessControlOptions o;
  o.principals = {{"chief:0", {Role::kChief, 0}},
                  {"worker:0", {Role::kWorker, 1}},
                  {"ps:1", {Role::kPs, -1, 1}},
                  {"client", {Role::kClient, -1}}};
  o.num_ranks = 2;
  o.job_id = kJob;
  return AccessControl(o);
}

TEST(AccessControl, TakesTheSenderFromItsAuthenticatedIdentityNotTheHeader) {
  const AccessControl access = Secure();
  auto who = access.Check({"r", "worker:0"}, Request(proto::PUSH, 1));
  ASSERT_TRUE(who.ok()) << who.status();
  EXPECT_EQ(who->role, Role::kWorker);
  EXPECT_EQ(who->rank, 1);
  // The header says CHIEF and rank 0: the identity says worker:0, rank 1.
  AccessControl::Refusal refusal;
  auto impostor = access.Check({"r", "worker:0"}, Request(proto::PUSH, 0, proto::CHIEF), &refusal);
  ASSERT_FALSE(impostor.ok());
  EXPECT_THAT(std::string(impostor.status().message()), HasSubstr("comes from worker:0 (rank 1)"));
  EXPECT_TRUE(refusal.unauthorized);
  auto stranger = access.Check({"r", ""}, Request(proto::STATS, 0), &refusal);
  EXPECT_EQ(stranger.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(refusal.unauthorized);
}

TEST(AccessControl, EachRoleMayDoWhatItsRoleMayAndNothingElse) {
  const AccessControl access = Secure();
  struct Case {
    const char* user;
    int rank;
    proto::MessageType type;
    bool allowed;
  };
  const std::vector<Case> cases = {
      {"chief:0", 0, proto::INIT, true},      {"chief:0", 0, proto::SHUTDOWN, true},
      {"chief:0", 0, proto::PUSH, true},      {"worker:0", 1, proto::PUSH_PULL, true},
      {"worker:0", 1, proto::REGISTER, true}, {"worker:0", 1, proto::BARRIER, true},
      {"worker:0", 1, proto::INIT, false},    {"worker:0", 1, proto::SAVE, false},
      {"worker:0", 1, proto::RESTORE, false}, {"worker:0", 1, proto::SHUTDOWN, false},
      {"worker:0", 1, proto::REPLICATE, false}, {"ps:1", -1, proto::REPLICATE, true},
      {"ps:1", -1, proto::PUSH, false},       {"ps:1", -1, proto::STATS, true},
      {"client", -1, proto::STATS, true},     {"client", -1, proto::PULL, false},
      {"client", -1, proto::PUSH, false},     {"client", -1, proto::SHUTDOWN, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.user) + " " + proto::MessageType_Name(c.type));
    auto who = access.Check({"r", c.user}, Request(c.type, c.rank));
    EXPECT_EQ(who.ok(), c.allowed) << who.status();
    if (!who.ok()) {
      EXPECT_EQ(who.status().code(), absl::StatusCode::kPermissionDenied);
    }
  }
  EXPECT_THAT(std::string(access.Check({"r", "worker:0"}, Request(proto::SHUTDOWN, 1))
                              .status()
                              .message()),
              HasSubstr("only the chief may SHUTDOWN"));
}

TEST(AccessControl, RefusesAnotherJobAReplyAndAnotherProtocolBeforeAnythingElse) {
  const AccessControl access = Secure();
  proto::Header other_job = Request(proto::PUSH, 1);
  other_job.set_job_id(kJob + 1);
  proto::Header reply = Request(proto::PUSH, 1);
  reply.set_is_reply(true);
  proto::Header old = Request(proto::PUSH, 1);
  old.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT + 1);
  for (const proto::Header& h : {other_job, reply, old}) {
    AccessControl::Refusal refusal;
    EXPECT_FALSE(access.Check({"r", "worker:0"}, h, &refusal).ok());
    EXPECT_FALSE(refusal.unauthorized);  // the envelope, not the sender
  }
  const std::string message(access.Check({"r", "worker:0"}, other_job).status().message());
  EXPECT_THAT(message, HasSubstr("does not serve"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("ab")));  // not the ps's own id
}

TEST(AccessControl, WithoutAuthenticationTakesTheHeaderAtItsWordWithinTheSpec) {
  AccessControlOptions o;
  o.num_ranks = 2;
  o.job_id = kJob;
  const AccessControl access(o);
  EXPECT_FALSE(access.authenticated());
  auto chief = access.Check({"r", ""}, Request(proto::INIT, 0, proto::CHIEF));
  ASSERT_TRUE(chief.ok());
  EXPECT_EQ(chief->role, Role::kChief);
  EXPECT_FALSE(access.Check({"r", ""}, Request(proto::PUSH, 2)).ok());  // no such rank
  EXPECT_FALSE(access.Check({"r", ""}, Request(proto::INIT, 1)).ok());  // rank 1 is a worker
}

TEST(AccessControl, ASparsePsTakesAnyJobUntilItLearnsItsOwn) {
  AccessControlOptions o;
  o.num_ranks = 256;
  o.job_id_from_init = true;
  AccessControl access(o);
  proto::Header init = Request(proto::INIT, 0, proto::CHIEF);
  init.set_job_id(77);
  EXPECT_TRUE(access.Check({"r", ""}, init).ok());
  access.SetJobId(77);
  EXPECT_TRUE(access.Check({"r", ""}, init).ok());
  init.set_job_id(78);
  EXPECT_FALSE(access.Check({"r", ""}, init).ok());
}

}  // namespace
}  // namespace pstrain
