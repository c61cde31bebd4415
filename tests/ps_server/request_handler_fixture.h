#pragma once

// The fixtures of the RequestHandler tests: one shard driven by requests
// from several "workers" (peers), with a fake clock and, for checkpoints, a
// temporary directory.

#include <sys/stat.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "gtest/gtest.h"
#include "ps_server/request_handler.h"

namespace pstrain {
// Anonymous: each test file gets its own copy (its Peer() must not meet
// pstrain::Peer at namespace scope).
namespace {

constexpr uint64_t kJob = 0x10b;
constexpr uint64_t kPlan = 0x91a4;
constexpr int kSize = 4;  // floats in the shard

std::string Peer(int rank) { return "peer" + std::to_string(rank); }

class RequestHandlerTest : public ::testing::Test {
 protected:
  proto::Header Base(proto::MessageType type, int rank) {
    proto::Header h;
    h.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
    h.set_job_id(kJob);
    h.set_type(type);
    h.mutable_sender()->set_type(rank == 0 ? proto::CHIEF : proto::WORKER);
    h.mutable_sender()->set_index(rank);
    h.set_rank(rank);
    h.set_request_id(++request_id_);
    h.set_plan_fingerprint(kPlan);
    h.set_range_begin(0);
    h.set_range_end(kSize);
    h.set_encoding(proto::F32);
    h.set_num_shards(num_shards_);
    return h;
  }

  // The handler, made on first use for a spec of spec_workers_ workers.
  RequestHandler& H() {
    if (handler_ == nullptr) {
      RequestHandlerOptions o{kJob,    0,         num_shards_,     spec_workers_,
                              principals_, &clock_, checkpoint_dir_, instance_};
      if (dynamic_) {  // a sparse spec: the job and the shard count come with INIT
        o.job_id = 0;
        o.num_shards = 0;
        o.dynamic_workers = true;
      }
      handler_ = std::make_unique<RequestHandler>(o);
    }
    return *handler_;
  }

  std::vector<Reply> Send(int rank, const Message& m) {
    std::vector<Reply> out;
    H().Handle({Peer(rank), user_id_}, m, &out);
    return out;
  }

  std::vector<Reply> Init(proto::UpdateMode mode, int workers, int staleness = 0, int backup = 0,
                          bool staleness_lr = false, int64_t total_steps = 0) {
    if (handler_ == nullptr) spec_workers_ = workers;
    proto::Header h = Base(proto::INIT, 0);
    proto::JobConfig* job = h.mutable_job();
    job->set_mode(mode);
    job->set_num_workers(workers);
    job->set_learning_rate(0.5);
    job->set_momentum(momentum_);
    job->MergeFrom(optimizer_);
    job->set_staleness(staleness);
    job->set_backup_workers(backup);
    job->set_staleness_lr(staleness_lr);
    job->set_total_steps(total_steps);
    job->set_dynamic_workers(dynamic_);
    return Send(0, MakeMessage(h, {1.0f, 1.0f, 1.0f, 1.0f}));
  }

  void RegisterAll(int workers) {
    for (int r = 1; r < workers; ++r) ASSERT_EQ(Send(r, MakeMessage(Base(proto::REGISTER, r), {})).size(), 1u);
  }

  std::vector<Reply> Push(int rank, int64_t step, int64_t version, float value, int n = 1,
                          bool then_pull = true) {
    proto::Header h = Base(then_pull ? proto::PUSH_PULL : proto::PUSH, rank);
    h.set_step(step);
    h.set_version(version);
    h.set_num_examples(n);
    return Send(rank, MakeMessage(h, std::vector<float>(kSize, value)));
  }

  std::vector<Reply> Pull(int rank, int64_t step, int64_t min_version) {
    proto::Header h = Base(proto::PULL, rank);
    h.set_step(step);
    h.set_version(min_version);
    return Send(rank, MakeMessage(h, {}));
  }

  static bool IsError(const Reply& r) { return r.header.error().code() != 0; }

  int spec_workers_ = 2;
  std::map<std::string, Principal> principals_;  // empty: --insecure
  std::string user_id_;                          // what the transport authenticated
  FakeClock clock_;
  std::string checkpoint_dir_;  // empty: SAVE and RESTORE refused
  uint64_t instance_ = 0;       // the ps process's id in replies
  int num_shards_ = 1;          // ps tasks in the spec (this one is ps 0)
  bool dynamic_ = false;        // a sparse spec (dynamic workers)
  double momentum_ = 0.0;       // what Init asks for
  proto::JobConfig optimizer_;  // merged into the job of Init and Restore
  std::unique_ptr<RequestHandler> handler_;
  uint64_t request_id_ = 0;
};

// Checkpoints: SAVE from the chief writes the shard; RESTORE on a fresh
// handler continues from it exactly (parameters, the optimizer's slots,
// version, each rank's clock); damage is refused naming the file.
class CheckpointRequestTest : public RequestHandlerTest {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/ckptXXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    checkpoint_dir_ = pattern;
    momentum_ = 0.5;
  }

  std::vector<Reply> Save(int rank, int64_t step) {
    proto::Header h = Base(proto::SAVE, rank);
    h.set_step(step);
    h.set_keep_checkpoints(3);
    return Send(rank, MakeMessage(h, {}));
  }

  std::vector<Reply> Restore(int64_t step, uint64_t checksum, bool verify_only,
                             bool rollback = false, int64_t generation = 0) {
    proto::Header h = Base(proto::RESTORE, 0);
    h.mutable_restore()->set_rollback(rollback);
    h.mutable_restore()->set_generation(generation);
    h.mutable_job()->set_mode(proto::SYNC);
    h.mutable_job()->set_num_workers(2);
    h.mutable_job()->set_learning_rate(0.5);
    h.mutable_job()->set_momentum(momentum_);
    h.mutable_job()->MergeFrom(optimizer_);
    h.mutable_restore()->set_step(step);
    h.mutable_restore()->set_checksum(checksum);
    h.mutable_restore()->set_verify_only(verify_only);
    return Send(0, MakeMessage(h, {}));
  }

  // One sync version from both workers, pushing `value`.
  void Version(int64_t v, float value) {
    Push(0, v, v, value);
    Push(1, v, v, value);
    ASSERT_EQ(H().version(), v + 1);
  }

  std::vector<float> Params() { return {H().params().begin(), H().params().end()}; }
};

// The fields of an Adam job (PyTorch's defaults), for optimizer_.
inline proto::JobConfig AdamJob(proto::Optimizer kind = proto::ADAM) {
  proto::JobConfig job;
  job.set_optimizer(kind);
  job.set_beta1(0.9);
  job.set_beta2(0.999);
  job.set_eps(1e-8);
  return job;
}

}  // namespace
}  // namespace pstrain
