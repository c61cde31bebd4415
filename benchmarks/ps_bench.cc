// The parameter server's costs, from the inside out:
//  - ShardStore::Apply: one update over a shard, per optimizer.
//  - RequestHandler: one sync version (N workers push, the shard applies),
//    without sockets: the protocol's own overhead.
//  - PUSH_PULL round trip: a PsClient and a PsServer in this process over
//    real loopback TCP, one worker, one ps: serialisation, ZeroMQ, the
//    update and the reply; unencrypted (--insecure) and with CURVE
//    (BM_PushPullRoundTripCurve), so that encryption's cost is measured
//    side by side; from 4 KiB to 64 MiB each way.
//  - Raw ZeroMQ echo (BM_RawZmqEcho): the same bytes each way between a
//    DEALER and a ROUTER that sends them straight back, in the same process
//    and run: the wire's ceiling, so PUSH_PULL's share of it is measured,
//    not guessed.
//  - The worker's --wire encoding of one step with error feedback
//    (BM_EncodeWithErrorFeedback/<bf16|fp16|topk:0.01>/<floats>): what a
//    lossy encoding adds to a step, per shard.
//  - Several workers (BM_PushPullWorkers/<floats>/<workers>, async, and
//    BM_RawZmqEchoWorkers): every worker a client of its own in a thread of
//    its own against one ps (one echo server); aggregate_bytes_per_s counts
//    every worker's round trips.
//  - BM_ShardStoreApplyThreads: one update shared with the ps's
//    --update_threads helpers (ps_server/chunk_pool.h).
//  - BM_ShardStoreApplyGradientCheck: a pushed gradient's finiteness
//    check in a pass of its own against in the update's pass.
// Each checks its result before it times and prints one RESULT line.

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "benchmarks/bench_main.h"
#include "common/cluster_spec.h"
#include "common/free_ports.h"
#include "common/shard_plan.h"
#include "ps_server/chunk_pool.h"
#include "ps_server/ps_server.h"
#include "ps_server/request_handler.h"
#include "ps_server/shard_store.h"
#include "transport/transport.h"
#include "worker/gradient_encoder.h"
#include "worker/ps_client.h"

namespace pstrain {
namespace {

// Args: floats, optimizer (proto::Optimizer: 0 sgd with momentum 0.5,
// 1 adam, 2 adamw with weight decay 0.01, 3 adagrad).
void BM_ShardStoreApply(benchmark::State& state) {
  const int64_t n = state.range(0);
  OptimizerConfig config;
  config.kind = static_cast<proto::Optimizer>(state.range(1));
  config.momentum = 0.5;
  config.weight_decay = config.kind == proto::ADAMW ? 0.01 : 0.0;
  config.eps = config.kind == proto::ADAGRAD ? kAdagradEps : kAdamEps;
  ShardStore store(std::vector<float>(n, 1.0f), config);
  const std::vector<float> grad(n, 0.01f);
  // The first step: sgd p - lr g; adam, adagrad p - lr g / |g| (to eps);
  // adamw that from p (1 - lr wd).
  const float expected = config.kind == proto::SGD     ? 0.999f
                         : config.kind == proto::ADAMW ? 0.999f - 0.1f
                                                       : 0.9f;
  if (!store.Apply(grad, 1.0f, 0.1f).ok() || std::fabs(store.params()[0] - expected) > 1e-5f) {
    state.SkipWithError("wrong update");
    return;
  }
  for (auto _ : state) {
    (void)store.Apply(grad, 1.0f, 0.1f);
    benchmark::DoNotOptimize(store.params().data());
  }
  state.SetLabel(OptimizerName(config.kind));
  state.SetItemsProcessed(state.iterations() * n);  // floats per second
}
BENCHMARK(BM_ShardStoreApply)->ArgsProduct({{10920, 669706}, {0, 1, 2, 3}});

// A PyTorch script's update: the step's settings per parameter group and
// tensor segment (ps_server/shard_store.h), against BM_ShardStoreApply's
// one pass of the job's optimizer. BM_ShardStoreApplySegments/<floats>/
// <optimizer>/<tensors: the shard cut into this many segments in two
// groups, every 4th absent>.
void BM_ShardStoreApplySegments(benchmark::State& state) {
  const int64_t n = state.range(0), tensors = state.range(2);
  OptimizerConfig config;
  config.kind = static_cast<proto::Optimizer>(state.range(1));
  config.momentum = 0.5;
  config.eps = config.kind == proto::ADAGRAD ? kAdagradEps : kAdamEps;
  std::vector<TensorSegment> segments;
  for (int64_t t = 0; t < tensors; ++t) {
    segments.push_back({n * t / tensors, n * (t + 1) / tensors, static_cast<int>(t),
                        static_cast<int>(t % 2)});
  }
  ShardStore store(std::vector<float>(n, 1.0f), config, nullptr, segments);
  StepOptions step;
  step.groups = {config, config};
  step.lrs = {0.1, 0.05};
  for (int64_t t = 3; t < tensors; t += 4) step.absent.push_back(static_cast<int32_t>(t));
  const std::vector<float> grad(n, 0.01f);
  if (!store.Apply(grad, 1.0f, 0.1f, false, &step).ok() ||
      (tensors > 3 && store.params()[static_cast<size_t>(segments[3].begin)] != 1.0f)) {
    state.SkipWithError("wrong update");
    return;
  }
  for (auto _ : state) {
    (void)store.Apply(grad, 1.0f, 0.1f, false, &step);
    benchmark::DoNotOptimize(store.params().data());
  }
  state.SetLabel(OptimizerName(config.kind));
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_ShardStoreApplySegments)->ArgsProduct({{669706}, {0, 1}, {1, 16, 256}});

// A pushed gradient's finiteness check with plain SGD (an async ps's
// update): BM_ShardStoreApplyGradientCheck/<floats>/<0: IsFiniteInF32's
// pass, then the update (sync's way), 1: in the update's own pass
// (ShardStore::Apply's check_grad, async's and SSP's way)>.
void BM_ShardStoreApplyGradientCheck(benchmark::State& state) {
  const int64_t n = state.range(0);
  const bool fused = state.range(1) == 1;
  OptimizerConfig config;  // SGD without momentum
  ShardStore store(std::vector<float>(n, 1.0f), config);
  const std::vector<float> grad(n, 0.01f);
  auto apply = [&] {
    if (fused) return store.Apply(grad, 1.0f, 0.1f, /*check_grad=*/true);
    if (!IsFiniteInF32(grad)) return absl::InvalidArgumentError("not finite");
    return store.Apply(grad, 1.0f, 0.1f);
  };
  if (!apply().ok() || std::fabs(store.params()[0] - 0.999f) > 1e-6f) {
    state.SkipWithError("wrong update");
    return;
  }
  for (auto _ : state) {
    benchmark::DoNotOptimize(apply());
    benchmark::DoNotOptimize(store.params().data());
  }
  state.SetLabel(fused ? "in the update's pass" : "a pass of its own");
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_ShardStoreApplyGradientCheck)->ArgsProduct({{669706, 1048576, 4194304}, {0, 1}});

// The same update shared with a ChunkPool (the ps's --update_threads):
// BM_ShardStoreApplyThreads/<floats>/<optimizer>/<threads, the caller's
// included>. Checked first against the update on one thread, bit for bit.
void BM_ShardStoreApplyThreads(benchmark::State& state) {
  const int64_t n = state.range(0);
  OptimizerConfig config;
  config.kind = static_cast<proto::Optimizer>(state.range(1));
  config.eps = config.kind == proto::ADAGRAD ? kAdagradEps : kAdamEps;
  ChunkPool pool(static_cast<int>(state.range(2)) - 1);
  std::vector<float> init(n), grad(n);
  for (int64_t i = 0; i < n; ++i) {
    init[i] = static_cast<float>(i % 97) * 0.01f;
    grad[i] = static_cast<float>(i % 89) * 0.001f - 0.04f;
  }
  ShardStore store(init, config, &pool);
  ShardStore alone(init, config);
  if (!store.Apply(grad, 1.0f, 0.1f).ok() || !alone.Apply(grad, 1.0f, 0.1f).ok() ||
      !std::equal(store.state().begin(), store.state().end(), alone.state().begin())) {
    state.SkipWithError("not the one-thread update");
    return;
  }
  for (auto _ : state) {
    (void)store.Apply(grad, 1.0f, 0.1f);
    benchmark::DoNotOptimize(store.params().data());
  }
  state.SetItemsProcessed(state.iterations() * n);  // floats per second
}
BENCHMARK(BM_ShardStoreApplyThreads)
    ->ArgsProduct({{669706, 1 << 22}, {0, 1}, {1, 2, 4}})
    ->UseRealTime();

// GradientEncoder::Encode on one shard of n floats: g + e, the encoding,
// the ps's decoding of it, the new residual. Checked first: what the ps
// decodes plus the residual is the gradient.
void BM_EncodeWithErrorFeedback(benchmark::State& state) {
  static const char* const kWires[] = {"bf16", "fp16", "topk:0.01"};
  const int64_t n = state.range(1);
  state.SetLabel(kWires[state.range(0)]);
  auto plan = ShardPlan::Create("bench", {{"w", n}}, 1, ShardStrategy::kBalanced);
  GradientEncoder encoder(*ParseWireEncoding(kWires[state.range(0)]), *plan);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1e-2f);
  std::vector<float> grad(n), decoded(n);
  for (float& g : grad) g = normal(rng);
  const EncodedShard& payload = encoder.Encode(0, grad, true)[0];
  const absl::Status s = DecodeGradient(payload.encoding, payload.topk_count, payload.bytes,
                                        absl::MakeSpan(decoded));
  for (int64_t i = 0; i < n; ++i) {
    if (!s.ok() || std::fabs(decoded[i] + encoder.residual()[i] - grad[i]) > 1e-6f * std::fabs(grad[i])) {
      state.SkipWithError("decoded + residual is not the gradient");
      return;
    }
  }
  int64_t step = 1;
  for (auto _ : state) benchmark::DoNotOptimize(encoder.Encode(step++, grad, true).data());
  state.SetItemsProcessed(state.iterations() * n);  // floats per second
}
BENCHMARK(BM_EncodeWithErrorFeedback)->ArgsProduct({{0, 1, 2}, {10920, 600000}});

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

// Floats per message: 4 KiB, the mnist_cnn model (87 KB), 256 KiB, the
// cnn_large model's push to one ps (2.68 MB), 4 MiB, 64 MiB.
#define PS_BENCH_SIZES Arg(1024)->Arg(21840)->Arg(65536)->Arg(669706)->Arg(1 << 20)->Arg(1 << 24)

// Runs `round_trip` on `clients` threads: the benchmark's own loop on the
// first, the others until it is done; sets bytes/s for the first and
// aggregate_bytes_per_s over all (each round trip moves `bytes`).
template <typename RoundTrip>
void TimeWithHelpers(benchmark::State& state, int clients, int64_t bytes, RoundTrip round_trip) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> helper_trips{0};
  std::vector<std::thread> helpers;
  for (int c = 1; c < clients; ++c) {
    helpers.emplace_back([&, c] {
      while (!stop.load(std::memory_order_relaxed)) {
        if (!round_trip(c)) return;
        helper_trips.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t h0 = helper_trips.load();
  for (auto _ : state) {
    if (!round_trip(0)) {
      state.SkipWithError("a round trip failed");
      break;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t trips = static_cast<int64_t>(state.iterations()) + helper_trips.load() - h0;
  stop = true;
  for (std::thread& t : helpers) t.join();
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["round_trips_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["aggregate_bytes_per_s"] = seconds > 0 ? static_cast<double>(trips * bytes) / seconds : 0;
}

// One round-trip set-up: `workers` workers and `num_ps` ps (the n floats
// split between them) in this process, over loopback TCP; with CURVE when
// `curve` (keys from a fresh job secret). Each ps's context has
// `ps_io_threads` I/O threads, each worker's `client_io_threads`. One
// worker: sync; more: async (a sync version would make them wait for each
// other).
struct RoundTripCase {
  bool curve = false;
  int workers = 1;
  int ps_io_threads = 1;
  int num_ps = 1;
  int client_io_threads = 1;
};

void PushPullRoundTrip(benchmark::State& state, const RoundTripCase& c) {
  const int64_t n = state.range(0);
  TransportSecurity security;
  if (c.curve) security.secret = JobSecret::Generate();
  auto spec = WithFreePorts(ClusterSpec::Local(c.num_ps, c.workers, 1));
  if (!spec.ok()) {
    state.SkipWithError(std::string(spec.status().message()).c_str());
    return;
  }
  std::vector<std::unique_ptr<PsServer>> servers;
  for (int k = 0; k < c.num_ps; ++k) {
    ClusterSpec ps_spec = *spec;
    ps_spec.set_task({TaskType::kPs, k});
    PsServerOptions ps_options;
    ps_options.io_threads = c.ps_io_threads;
    auto server = PsServer::Create(ps_spec, ps_options, security);
    if (!server.ok()) {
      state.SkipWithError(std::string(server.status().message()).c_str());
      return;
    }
    servers.push_back(*std::move(server));
  }
  std::vector<std::thread> serve;
  for (auto& server : servers) serve.emplace_back([&server] { (void)server->Run(); });
  auto plan = ShardPlan::Create("bench", {{"w", n}}, c.num_ps, ShardStrategy::kBalanced);
  PsClientOptions client_options;
  client_options.security = security;
  client_options.io_threads = c.client_io_threads;
  struct Worker {
    std::unique_ptr<PsClient> client;
    std::vector<float> params, grads;
    std::vector<EncodedShard> pushed;  // grads as f32, a payload per shard
    std::vector<int64_t> versions;
    std::vector<ShardReply> replies;
    int64_t step = 0;
  };
  std::vector<Worker> w(c.workers);
  proto::JobConfig job;
  job.set_mode(c.workers == 1 ? proto::SYNC : proto::ASYNC);
  job.set_num_workers(c.workers);
  job.set_learning_rate(0.01);
  absl::Status s = plan.status();
  for (int r = 0; r < c.workers && s.ok(); ++r) {
    auto client = PsClient::Create(*spec, {TaskType::kWorker, r}, *plan, client_options);
    if (!client.ok()) {
      s = client.status();
      break;
    }
    w[r].client = *std::move(client);
    w[r].params.assign(n, 1.0f);
    w[r].grads.assign(n, 0.5f);
    w[r].versions.assign(c.num_ps, 0);
    for (int k = 0; k < c.num_ps; ++k) {
      const ShardRange range = plan->range(k);
      w[r].pushed.push_back({proto::F32,
                             0,
                             {reinterpret_cast<const char*>(w[r].grads.data() + range.begin),
                              static_cast<size_t>(range.size()) * sizeof(float)}});
    }
    s = w[r].client->WaitForServers();
    if (s.ok() && r == 0) s = w[r].client->Init(job, w[r].params);
    if (s.ok() && r > 0) s = w[r].client->Register().status();
  }
  auto round_trip = [&](int r) {
    Worker& x = w[r];
    const absl::Status st = x.client->PushPull(x.step++, x.versions, 128, x.pushed,
                                               absl::MakeSpan(x.params), &x.replies);
    if (!st.ok()) return false;
    for (int k = 0; k < c.num_ps; ++k) x.versions[k] = x.replies[k].version;
    return true;
  };
  if (s.ok() && (!round_trip(0) || std::fabs(w[0].params[0] - 0.995f) > 1e-6f ||
                 std::fabs(w[0].params[n - 1] - 0.995f) > 1e-6f)) {
    s = absl::InternalError("wrong parameters back");
  }
  if (!s.ok()) {
    state.SkipWithError(std::string(s.message()).c_str());
  } else {
    TimeWithHelpers(state, c.workers, n * 8, round_trip);  // gradient out, parameters back
  }
  if (w[0].client != nullptr) (void)w[0].client->Shutdown();
  for (std::thread& t : serve) t.join();
}

void BM_PushPullRoundTrip(benchmark::State& state) { PushPullRoundTrip(state, {}); }
void BM_PushPullRoundTripCurve(benchmark::State& state) {
  RoundTripCase c;
  c.curve = true;
  PushPullRoundTrip(state, c);
}
BENCHMARK(BM_PushPullRoundTrip)->PS_BENCH_SIZES->UseRealTime();
BENCHMARK(BM_PushPullRoundTripCurve)->PS_BENCH_SIZES->UseRealTime();

void BM_PushPullWorkers(benchmark::State& state) {
  RoundTripCase c;
  c.workers = static_cast<int>(state.range(1));
  PushPullRoundTrip(state, c);
}
BENCHMARK(BM_PushPullWorkers)
    ->ArgsProduct({{65536, 1 << 20}, {1, 2, 4, 8}})
    ->UseRealTime();

// With CURVE, several workers, and the ps's I/O threads (--io_threads):
// BM_PushPullWorkersCurve/<floats>/<workers>/<io_threads>.
void BM_PushPullWorkersCurve(benchmark::State& state) {
  RoundTripCase c;
  c.curve = true;
  c.workers = static_cast<int>(state.range(1));
  c.ps_io_threads = static_cast<int>(state.range(2));
  PushPullRoundTrip(state, c);
}
BENCHMARK(BM_PushPullWorkersCurve)
    ->ArgsProduct({{65536, 1 << 20}, {1, 2, 4}, {1, 2}})
    ->UseRealTime();

// One worker and several ps, the floats split between them, with the
// worker's I/O threads (its --io_threads): with one, the worker's single
// I/O thread encrypts and decrypts every shard's traffic in turn; with as
// many as shards, ZeroMQ gives each connection a thread of its own.
// BM_PushPullShards<Curve>/<floats>/<num_ps>/<client_io_threads>.
RoundTripCase ShardsCase(const benchmark::State& state, bool curve) {
  RoundTripCase c;
  c.curve = curve;
  c.num_ps = static_cast<int>(state.range(1));
  c.client_io_threads = static_cast<int>(state.range(2));
  return c;
}
void BM_PushPullShards(benchmark::State& state) {
  PushPullRoundTrip(state, ShardsCase(state, false));
}
void BM_PushPullShardsCurve(benchmark::State& state) {
  PushPullRoundTrip(state, ShardsCase(state, true));
}
BENCHMARK(BM_PushPullShards)->ArgsProduct({{669706, 1 << 22}, {2}, {1, 2}})->UseRealTime();
BENCHMARK(BM_PushPullShardsCurve)->ArgsProduct({{669706, 1 << 22}, {2}, {1, 2}})->UseRealTime();

// The wire's ceiling: `clients` DEALERs send n floats to one ROUTER, which
// sends each message straight back (no copy: the received frame is sent).
// `server_context`: the echo has a context (an I/O thread) of its own, as
// a ps in another process does; otherwise one I/O thread serves both ends
// (the first baseline, 2026-11-24), which saves the hand-offs between two.
void RawZmqEcho(benchmark::State& state, int clients, bool server_context = false) {
  const int64_t n = state.range(0);
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  zmq::context_t context(1);
  zmq::context_t own_context(1);
  zmq::socket_t router(server_context ? own_context : context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  std::atomic<bool> done{false};
  std::thread echo([&] {
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    while (!done.load()) {
      if (zmq::poll(&item, 1, std::chrono::milliseconds(50)) == 0) continue;
      zmq::message_t id, body;
      if (!router.recv(id) || !router.recv(body)) return;
      router.send(id, zmq::send_flags::sndmore);
      router.send(body, zmq::send_flags::none);
    }
  });
  std::vector<zmq::socket_t> dealers;
  for (int c = 0; c < clients; ++c) {
    dealers.emplace_back(context, zmq::socket_type::dealer);
    dealers.back().set(zmq::sockopt::linger, 0);
    dealers.back().connect(endpoint);
  }
  std::vector<std::vector<float>> out(clients, std::vector<float>(n, 0.5f));
  std::vector<std::vector<float>> in(clients, std::vector<float>(n, 0.0f));
  auto round_trip = [&](int c) {
    // As a worker does: send from its gradient buffer, receive into its
    // parameter buffer.
    if (!dealers[c].send(zmq::buffer(out[c].data(), bytes), zmq::send_flags::none)) return false;
    zmq::message_t reply;
    if (!dealers[c].recv(reply) || reply.size() != bytes) return false;
    std::memcpy(in[c].data(), reply.data(), bytes);
    return true;
  };
  if (!round_trip(0) || in[0][n - 1] != 0.5f) {
    state.SkipWithError("the echo came back wrong");
  } else {
    TimeWithHelpers(state, clients, n * 8, round_trip);
  }
  done = true;
  echo.join();
}

void BM_RawZmqEcho(benchmark::State& state) { RawZmqEcho(state, 1); }
BENCHMARK(BM_RawZmqEcho)->PS_BENCH_SIZES->UseRealTime();
// Like for like with PUSH_PULL, whose ps has a context of its own.
void BM_RawZmqEchoTwoContexts(benchmark::State& state) { RawZmqEcho(state, 1, true); }
BENCHMARK(BM_RawZmqEchoTwoContexts)->PS_BENCH_SIZES->UseRealTime();
void BM_RawZmqEchoWorkers(benchmark::State& state) {
  RawZmqEcho(state, static_cast<int>(state.range(1)));
}
BENCHMARK(BM_RawZmqEchoWorkers)
    ->ArgsProduct({{65536, 1 << 20}, {1, 2, 4, 8}})
    ->UseRealTime();

// Would the message in pieces help? The same bytes each way, sent as
// `pieces` ZeroMQ messages; the echo keeps every piece until the last is
// in and then sends them all back (a ps must have a whole push before it
// updates). With CURVE, libzmq encrypts and decrypts each message whole,
// so pieces let the receiver decrypt piece j while the sender encrypts
// piece j + 1. BM_RawZmqEchoPieces/<floats>/<pieces>/<curve 0|1>.
void BM_RawZmqEchoPieces(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int pieces = static_cast<int>(state.range(1));
  const bool curve = state.range(2) != 0;
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  const size_t piece = (bytes / sizeof(float) + pieces - 1) / pieces * sizeof(float);
  char server_public[41], server_secret[41], client_public[41], client_secret[41];
  if (zmq_curve_keypair(server_public, server_secret) != 0 ||
      zmq_curve_keypair(client_public, client_secret) != 0) {
    state.SkipWithError("no CURVE keys (libzmq without libsodium?)");
    return;
  }
  zmq::context_t context(1);
  zmq::context_t echo_context(1);
  zmq::socket_t router(echo_context, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  if (curve) {
    router.set(zmq::sockopt::curve_server, 1);
    router.set(zmq::sockopt::curve_secretkey, std::string(server_secret));
  }
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  std::atomic<bool> done{false};
  std::thread echo([&] {
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    std::vector<zmq::message_t> held;
    size_t held_bytes = 0;
    while (!done.load()) {
      if (zmq::poll(&item, 1, std::chrono::milliseconds(50)) == 0) continue;
      zmq::message_t id, body;
      if (!router.recv(id) || !router.recv(body)) return;
      held_bytes += body.size();
      held.push_back(std::move(body));
      if (held_bytes < bytes) continue;
      for (zmq::message_t& m : held) {
        zmq::message_t to;
        to.copy(id);
        router.send(to, zmq::send_flags::sndmore);
        router.send(m, zmq::send_flags::none);
      }
      held.clear();
      held_bytes = 0;
    }
  });
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  if (curve) {
    dealer.set(zmq::sockopt::curve_serverkey, std::string(server_public));
    dealer.set(zmq::sockopt::curve_publickey, std::string(client_public));
    dealer.set(zmq::sockopt::curve_secretkey, std::string(client_secret));
  }
  dealer.connect(endpoint);
  std::vector<float> out(n, 0.5f), in(n, 0.0f);
  auto round_trip = [&](int) {
    const char* from = reinterpret_cast<const char*>(out.data());
    for (size_t at = 0; at < bytes; at += piece) {
      const size_t size = std::min(piece, bytes - at);
      if (!dealer.send(zmq::message_t(const_cast<char*>(from + at), size, nullptr, nullptr),
                       zmq::send_flags::none)) {
        return false;
      }
    }
    char* to = reinterpret_cast<char*>(in.data());
    for (size_t at = 0; at < bytes;) {
      zmq::message_t reply;
      if (!dealer.recv(reply) || reply.size() > bytes - at) return false;
      std::memcpy(to + at, reply.data(), reply.size());
      at += reply.size();
    }
    return true;
  };
  if (!round_trip(0) || in[n - 1] != 0.5f) {
    state.SkipWithError("the echo came back wrong");
  } else {
    TimeWithHelpers(state, 1, n * 8, round_trip);
  }
  done = true;
  echo.join();
}
BENCHMARK(BM_RawZmqEchoPieces)
    ->ArgsProduct({{16384, 32768, 59635, 65536, 669706}, {1, 2, 4, 16}, {0, 1}})
    ->UseRealTime();

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
  pstrain::ResultReporter reporter;
  return pstrain::RunBenchmarks(argc, argv, &reporter);
}
