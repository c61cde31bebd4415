#pragma once

// Early-return helpers for absl::Status / absl::StatusOr, in the style of
// leveldb's and TensorFlow's. Project code propagates errors with these; it
// never throws.

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define PSTRAIN_CONCAT_INNER_(a, b) a##b
#define PSTRAIN_CONCAT_(a, b) PSTRAIN_CONCAT_INNER_(a, b)

// RETURN_IF_ERROR(expr): returns the status of `expr` when it is not OK.
#define RETURN_IF_ERROR(expr)                                  \
  do {                                                         \
    const ::absl::Status pstrain_status_ = (expr);             \
    if (!pstrain_status_.ok()) return pstrain_status_;         \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates the StatusOr `expr`; returns its
// status when not OK, else moves its value into `lhs` (which may declare).
// It expands to several statements: put it in braces under an `if`.
#define ASSIGN_OR_RETURN(lhs, expr) \
  PSTRAIN_ASSIGN_OR_RETURN_IMPL_(PSTRAIN_CONCAT_(pstrain_statusor_, __LINE__), lhs, expr)

#define PSTRAIN_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()
