#include "common/logging.h"

#include <cstdio>
#include <iomanip>
#include <ostream>
#include <string>

#include "glog/logging.h"
#include "google/protobuf/stubs/logging.h"

namespace pstrain {
namespace {

void ShortPrefix(std::ostream& s, const google::LogMessageInfo& l, void*) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%c %02d:%02d:%02d.%03d ", l.severity[0], l.time.hour(),
                l.time.min(), l.time.sec(), l.time.usec() / 1000);
  s << buf << l.filename << ':' << l.line_number << ']';
}

// Protobuf logs an ERROR line for every string field with invalid UTF-8 it
// parses, and a peer chooses those bytes: its lines go through glog, at
// most one in 1000, so no peer can flood a task's log.
void ProtobufToGlog(google::protobuf::LogLevel level, const char* filename, int line,
                    const std::string& message) {
  if (level < google::protobuf::LOGLEVEL_WARNING) return;
  if (level >= google::protobuf::LOGLEVEL_FATAL) {
    LOG(ERROR) << "protobuf " << filename << ":" << line << ": " << message;
    return;
  }
  LOG_EVERY_N(WARNING, 1000) << "protobuf " << filename << ":" << line << ": " << message
                             << " (" << google::COUNTER << " such lines; 1 in 1000 shown)";
}

}  // namespace

void InitLogging(const char* argv0) {
  FLAGS_logtostderr = true;
  FLAGS_colorlogtostderr = false;
  google::InitGoogleLogging(argv0, &ShortPrefix, nullptr);
  google::protobuf::SetLogHandler(&ProtobufToGlog);
  // Lines reach the launcher (a pipe) as they are written.
  std::setvbuf(stderr, nullptr, _IOLBF, 0);
}

}  // namespace pstrain
