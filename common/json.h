#pragma once

// JSON in and out through protobuf's JSON support, so the project needs no
// JSON library of its own: google.protobuf.Value is a full JSON tree, and
// typed records (summary.json) are protobuf messages printed as JSON.

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "google/protobuf/struct.pb.h"

namespace pstrain {

// Parses `text` as one JSON value. Errors are InvalidArgument with a
// one-line message that starts with `origin` (a file name, "TF_CONFIG").
// Duplicate keys and trailing garbage are errors.
absl::StatusOr<google::protobuf::Value> ParseJson(absl::string_view text,
                                                  absl::string_view origin);

// Parses JSON text into `message` (unknown fields are errors unless
// `ignore_unknown`). Errors name `origin`.
absl::Status ParseJsonMessage(absl::string_view text, absl::string_view origin,
                              google::protobuf::Message* message,
                              bool ignore_unknown = false);

// Prints `message` as indented JSON with the proto field names
// (snake_case) and every field, defaults included.
std::string ToJson(const google::protobuf::Message& message);

// A number as JSON: "%.6g" of it, or null when it is NaN or infinite
// (JSON has no such numbers; a strict parser refuses "nan").
std::string JsonNumberOrNull(double value);

// The JSON type of `value` in words ("a string", "a number", ...), for
// error messages.
absl::string_view JsonKindName(const google::protobuf::Value& value);

}  // namespace pstrain
