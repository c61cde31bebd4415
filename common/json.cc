#include "common/json.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "common/status_macros.h"
#include "google/protobuf/util/json_util.h"

namespace pstrain {
namespace {

// protobuf's parser reports errors on several lines with a caret; a log line
// and an exception-free CLI want one line.
std::string OneLine(absl::string_view message) {
  std::string s = absl::StrReplaceAll(message, {{"\n", " "}, {"\r", " "}});
  return std::string(absl::StripTrailingAsciiWhitespace(s));
}

constexpr int kMaxJsonDepth = 64;

// The deepest nesting of arrays and objects in `text`, brackets inside
// strings left out (an escaped quote does not end one).
int JsonDepth(absl::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// InvalidArgument for `text` nested past kMaxJsonDepth: protobuf's parser
// takes time quadratic in the depth of nested arrays (40,000 deep:
// minutes), and no input of ours nests beyond a few levels.
absl::Status CheckJsonDepth(absl::string_view text, absl::string_view origin) {
  if (const int depth = JsonDepth(text); depth > kMaxJsonDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": nested ", depth, " deep (at most ", kMaxJsonDepth, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<google::protobuf::Value> ParseJson(absl::string_view text,
                                                  absl::string_view origin) {
  if (absl::StripAsciiWhitespace(text).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": empty, expected a JSON object"));
  }
  RETURN_IF_ERROR(CheckJsonDepth(text, origin));
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
  RETURN_IF_ERROR(CheckJsonDepth(text, origin));
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
