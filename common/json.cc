#include "common/json.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "google/protobuf/util/json_util.h"

namespace pstrain {
namespace {

// protobuf's parser reports errors on several lines with a caret; a log line
// and an exception-free CLI want one line.
std::string OneLine(absl::string_view message) {
  std::string s = absl::StrReplaceAll(message, {{"\n", " "}, {"\r", " "}});
  return std::string(absl::StripTrailingAsciiWhitespace(s));
}

}  // namespace

absl::StatusOr<google::protobuf::Value> ParseJson(absl::string_view text,
                                                  absl::string_view origin) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": empty, expected a JSON object"));
  }
  google::protobuf::Value value;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), &value);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": not valid JSON: ", OneLine(status.message().as_string())));
  }
  return value;
}

absl::Status ParseJsonMessage(absl::string_view text, absl::string_view origin,
                              google::protobuf::Message* message, bool ignore_unknown) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = ignore_unknown;
  const auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), message, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": ", OneLine(status.message().as_string())));
  }
  return absl::OkStatus();
}

std::string ToJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.always_print_primitive_fields = true;
  options.preserve_proto_field_names = true;
  std::string out;
  // Printing a well-formed in-memory message cannot fail.
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

absl::string_view JsonKindName(const google::protobuf::Value& value) {
  switch (value.kind_case()) {
    case google::protobuf::Value::kNullValue:
      return "null";
    case google::protobuf::Value::kNumberValue:
      return "a number";
    case google::protobuf::Value::kStringValue:
      return "a string";
    case google::protobuf::Value::kBoolValue:
      return "a boolean";
    case google::protobuf::Value::kStructValue:
      return "an object";
    case google::protobuf::Value::kListValue:
      return "a list";
    default:
      return "nothing";
  }
}

std::string JsonNumberOrNull(double value) {
  return std::isfinite(value) ? absl::StrFormat("%.6g", value) : std::string("null");
}

}  // namespace pstrain
