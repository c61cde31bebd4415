// The parameter server's costs, from the inside out:
//  - ShardStore::Apply: one SGD-with-momentum update over a shard.
//  - RequestHandler: one sync version (N workers push, the shard applies),
//    without sockets: the protocol's own overhead.
//  - PUSH_PULL round trip: a PsClient and a PsServer in this process over
//    real loopback TCP, one worker, one ps: serialisation, ZeroMQ, the
//    update and the reply; unencrypted (--insecure) and with CURVE
//    (BM_PushPullRoundTripCurve), so that encryption's cost is measured
//    side by side.
// Each checks its result before it times and prints one RESULT line.

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "common/cluster_spec.h"
#include "common/free_ports.h"
#include "common/shard_plan.h"
#include "ps_server/ps_server.h"
#include "ps_server/request_handler.h"
#include "ps_server/shard_store.h"
#include "worker/ps_client.h"

namespace pstrain {
namespace {

void BM_ShardStoreApply(benchmark::State& state) {
  const int64_t n = state.range(0);
  ShardStore store(std::vector<float>(n, 1.0f), {0.5, false, 0.0});
  const std::vector<float> grad(n, 0.01f);
  if (!store.Apply(grad, 1.0f, 0.1f).ok() || std::fabs(store.params()[0] - 0.999f) > 1e-6f) {
    state.SkipWithError("wrong update");
    return;
  }
  for (auto _ : state) {
    (void)store.Apply(grad, 1.0f, 0.1f);
    benchmark::DoNotOptimize(store.params().data());
  }
  state.SetItemsProcessed(state.iterations() * n);  // floats per second
}
BENCHMARK(BM_ShardStoreApply)->Arg(10920)->Arg(669706);

Message MakeMessage(proto::Header h, const std::vector<float>& payload) {
  Message m;
  m.header = std::move(h);
  if (!payload.empty()) {
    m.payload = zmq::message_t(payload.data(), payload.size() * sizeof(float));
    m.has_payload = true;
  }
  return m;
}

void BM_SyncVersionInHandler(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int workers = static_cast<int>(state.range(1));
  RequestHandler handler({1, 0, 1, workers, {}, nullptr, ""});
  proto::Header base;
  base.set_protocol_version(proto::PROTOCOL_VERSION_CURRENT);
  base.set_job_id(1);
  base.set_plan_fingerprint(2);
  base.set_range_end(static_cast<uint64_t>(n));
  base.set_encoding(proto::F32);
  base.set_num_shards(1);
  base.mutable_sender()->set_type(proto::WORKER);
  proto::Header init = base;
  init.set_type(proto::INIT);
  init.mutable_job()->set_mode(proto::SYNC);
  init.mutable_job()->set_num_workers(workers);
  init.mutable_job()->set_learning_rate(0.01);
  init.mutable_job()->set_momentum(0.5);
  std::vector<Reply> out;
  handler.Handle({"chief", ""}, MakeMessage(init, std::vector<float>(n, 0.0f)), &out);
  const std::vector<float> grad(n, 0.5f);
  int64_t version = 0;
  for (auto _ : state) {
    for (int r = 0; r < workers; ++r) {
      proto::Header push = base;
      push.set_type(proto::PUSH_PULL);
      push.set_rank(r);
      push.set_request_id(static_cast<uint64_t>(version + 1));
      push.set_version(version);
      push.set_num_examples(64);
      out.clear();
      handler.Handle({absl::StrCat("w", r), ""}, MakeMessage(push, grad), &out);
    }
    ++version;
  }
  if (handler.version() != version || out.size() != static_cast<size_t>(workers)) {
    state.SkipWithError("versions did not advance");
    return;
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["versions_per_s"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                                        benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SyncVersionInHandler)->Args({10920, 2})->Args({669706, 2})->Args({10920, 8});

// One worker and one ps in this process, over loopback TCP; with CURVE
// when `curve` (keys from a fresh job secret).
void PushPullRoundTrip(benchmark::State& state, bool curve) {
  const int64_t n = state.range(0);
  TransportSecurity security;
  if (curve) security.secret = JobSecret::Generate();
  auto local = ClusterSpec::FromJson(
      R"({"cluster": {"worker": ["localhost:1"], "ps": ["localhost:2"]}})", "bench");
  auto spec = WithFreePorts(*local);
  if (!spec.ok()) {
    state.SkipWithError(std::string(spec.status().message()).c_str());
    return;
  }
  ClusterSpec ps_spec = *spec;
  ps_spec.set_task({TaskType::kPs, 0});
  auto server = PsServer::Create(ps_spec, PsServerOptions{}, security);
  if (!server.ok()) {
    state.SkipWithError(std::string(server.status().message()).c_str());
    return;
  }
  std::thread serve([&] { (void)(*server)->Run(); });
  auto plan = ShardPlan::Create("bench", {{"w", n}}, 1, ShardStrategy::kBalanced);
  PsClientOptions client_options;
  client_options.security = security;
  auto client = PsClient::Create(*spec, {TaskType::kWorker, 0}, *plan, client_options);
  proto::JobConfig job;
  job.set_mode(proto::SYNC);
  job.set_num_workers(1);
  job.set_learning_rate(0.01);
  std::vector<float> params(n, 1.0f), grads(n, 0.5f);
  std::vector<int64_t> versions = {0};
  std::vector<ShardReply> replies;
  absl::Status s = (*client)->WaitForServers();
  if (s.ok()) s = (*client)->Init(job, params);
  if (s.ok()) s = (*client)->PushPull(0, versions, 128, grads, absl::MakeSpan(params), &replies);
  if (!s.ok() || std::fabs(params[0] - 0.995f) > 1e-6f) {
    state.SkipWithError(s.ok() ? "wrong parameters back" : std::string(s.message()).c_str());
  } else {
    versions[0] = replies[0].version;
    for (auto _ : state) {
      (void)(*client)->PushPull(versions[0], versions, 128, grads, absl::MakeSpan(params), &replies);
      versions[0] = replies[0].version;
    }
    state.SetBytesProcessed(state.iterations() * n * 8);  // gradient out, parameters back
    state.counters["round_trips_per_s"] =
        benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  }
  (void)(*client)->Shutdown();
  serve.join();
}

void BM_PushPullRoundTrip(benchmark::State& state) { PushPullRoundTrip(state, false); }
void BM_PushPullRoundTripCurve(benchmark::State& state) { PushPullRoundTrip(state, true); }
BENCHMARK(BM_PushPullRoundTrip)->Arg(10920)->Arg(21840)->Arg(669706)->UseRealTime();
BENCHMARK(BM_PushPullRoundTripCurve)->Arg(10920)->Arg(21840)->Arg(669706)->UseRealTime();

// Console output plus one line per run: RESULT bench=ps case=<name/args>
// ns_per_op=<real time> <counter>=<value>...
class ResultReporter : public benchmark::ConsoleReporter {
 public:
  ResultReporter() : ConsoleReporter(OO_None) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      GetOutputStream() << "RESULT bench=ps case=" << run.benchmark_name()
                        << " ns_per_op=" << std::llround(run.GetAdjustedRealTime());
      for (const auto& [name, counter] : run.counters) {
        GetOutputStream() << " " << name << "=" << std::llround(counter.value);
      }
      GetOutputStream() << std::endl;
    }
  }
};

}  // namespace
}  // namespace pstrain

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  pstrain::ResultReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
