#pragma once

// Force-included into every translation unit of a ThreadSanitizer build
// (cmake/PstrainHelpers.cmake); never included by hand.
//
// Why: protobuf 3.21's map_field.h gives MapFieldBase two more members
// (seq1_, seq2_: protobuf's own map race check) when __SANITIZE_THREAD__ is
// defined, which GCC does under -fsanitize=thread. Debian's libprotobuf is
// built without it, so a TSan-built file and the library disagree on the
// layout of every message with a map field: google.protobuf.Struct, filled by
// the library's JSON parser, is read 8 bytes off by our code, and
// ClusterSpec::FromJson dies with a SEGV in map.h. Including map_field.h here
// with the macro hidden gives our code the library's layout; the include
// guard keeps it so, and everything after this header still sees the macro.

#pragma push_macro("__SANITIZE_THREAD__")
#undef __SANITIZE_THREAD__
#include "google/protobuf/map_field.h"
#pragma pop_macro("__SANITIZE_THREAD__")
