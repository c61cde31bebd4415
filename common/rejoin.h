#pragma once

// "Register again": the status a ps gives, and a worker acts on, when the
// job's state moved under a client without anything being wrong with it:
// the ps restarted (its requests were lost, or it waits for the chief to
// restore it), or the chief rolled the shard back to a checkpoint. A
// worker that gets one does not fail: it connects again, re-registers and
// continues from the position the shards give it (worker/trainer.h).
//
// On the wire it is an error reply with Header.rejoin set; in a process it
// is an absl::Status carrying the payload kRejoinPayload, whatever its code.

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/string_view.h"

namespace pstrain {

inline constexpr absl::string_view kRejoinPayload = "pstrain/rejoin";

// Unavailable(message), marked as a rejoin.
inline absl::Status RejoinError(absl::string_view message) {
  absl::Status s = absl::UnavailableError(message);
  s.SetPayload(kRejoinPayload, absl::Cord("1"));
  return s;
}

// `status` with the rejoin mark added (its code and message kept).
inline absl::Status MarkRejoin(absl::Status status) {
  if (!status.ok()) status.SetPayload(kRejoinPayload, absl::Cord("1"));
  return status;
}

inline bool IsRejoin(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kRejoinPayload).has_value();
}

// "The job finished without you": what a worker hears when the chief shut
// the ps tasks down while it was frozen or declared dead (a SHUTDOWN notice
// from the ps). Such a worker has nothing left to do and exits 0.
inline constexpr absl::string_view kJobFinishedPayload = "pstrain/job-finished";

inline absl::Status JobFinishedError(absl::string_view message) {
  absl::Status s = absl::CancelledError(message);
  s.SetPayload(kJobFinishedPayload, absl::Cord("1"));
  return s;
}

inline bool IsJobFinished(const absl::Status& status) {
  return !status.ok() && status.GetPayload(kJobFinishedPayload).has_value();
}

}  // namespace pstrain
