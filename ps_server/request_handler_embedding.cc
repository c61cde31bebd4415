// The request handler's embedding tables (ps_server/embedding_tables.h):
// EMBEDDING_PULL, EMBEDDING_PUSH, and sync's application of a version's
// row gradients once the shard applied the version.

#include <memory>

#include "absl/strings/str_cat.h"
#include "ps_server/request_handler.h"

namespace pstrain {
namespace {

constexpr int kMaxExamplesPerEmbeddingPush = 1 << 24;

}  // namespace

void RequestHandler::HandleEmbeddingPull(const std::string& peer, const Message& m,
                                         std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (absl::Status s = CheckWorkerRequest(m); !s.ok()) return Refuse(peer, h, s, out);
  if (tables_.empty()) {
    return Refuse(peer, h, absl::FailedPreconditionError("this job has no embedding tables"), out);
  }
  absl::StatusOr<std::vector<float>> rows = tables_.Pull(h.embedding(), m.PayloadBytes());
  if (!rows.ok()) return Refuse(peer, h, rows.status(), out);
  Reply reply{peer, MakeReply(h), false};
  reply.payload = std::make_shared<const std::vector<float>>(*std::move(rows));
  out->push_back(std::move(reply));
}

void RequestHandler::HandleEmbeddingPush(const std::string& peer, const Message& m,
                                         std::vector<Reply>* out) {
  const proto::Header& h = m.header;
  if (absl::Status s = CheckWorkerRequest(m); !s.ok()) return Refuse(peer, h, s, out);
  if (tables_.empty()) {
    return Refuse(peer, h, absl::FailedPreconditionError("this job has no embedding tables"), out);
  }
  if (h.num_examples() < 0 || h.num_examples() > kMaxExamplesPerEmbeddingPush) {
    return Refuse(peer, h, absl::InvalidArgumentError(
        absl::StrCat("num_examples ", h.num_examples(), " is not in [0, 2^24]")), out);
  }
  if (h.version() < 0 || h.version() > version()) {
    return Refuse(peer, h, absl::InvalidArgumentError(absl::StrCat(
        "an embedding push computed on version ", h.version(), ", which this shard has not made")),
        out);
  }
  absl::StatusOr<EmbeddingTables::Push> push =
      tables_.ParsePush(h.embedding(), m.PayloadBytes(), h.num_examples());
  if (!push.ok()) return Refuse(peer, h, push.status(), out);
  Reply reply{peer, MakeReply(h), false, /*record=*/true};
  if (job_.mode() != proto::SYNC) {
    // --staleness_lr: the rows' lr divided by the push's staleness, as the
    // dense gradient's.
    const int64_t staleness = version() - h.version();
    if (job_.staleness_lr() && staleness > 1) {
      for (EmbeddingTables::Push::Slice& s : push->slices) s.lr /= static_cast<double>(staleness);
    }
    reply.header.set_staleness(staleness);
    tables_.HoldPending(h.rank(), *std::move(push));
  } else if (h.version() < version()) {
    reply.header.set_dropped(true);  // the version went on without it, as its dense push will be
  } else if (!tables_.Hold(h.rank(), h.version(), *std::move(push))) {
    stats_.set_duplicate_requests(stats_.duplicate_requests() + 1);
    reply.header.set_dropped(true);
  }
  out->push_back(std::move(reply));
}

void RequestHandler::SettleEmbeddings() {
  if (initialized() && !tables_.empty() && job_.mode() == proto::SYNC) {
    tables_.ApplyThrough(version());
  }
}

}  // namespace pstrain
