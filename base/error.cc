#include "base/error.h"

#include <cerrno>
#include <ostream>

namespace forktrial {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::not_found:
      return "not_found";
    case ErrorCode::invalid_argument:
      return "invalid_argument";
    case ErrorCode::failed_precondition:
      return "failed_precondition";
    case ErrorCode::conflict:
      return "conflict";
    case ErrorCode::resource_exhausted:
      return "resource_exhausted";
    case ErrorCode::unavailable:
      return "unavailable";
    case ErrorCode::cancelled:
      return "cancelled";
    case ErrorCode::internal:
      return "internal";
  }
  return "unknown";
}

Problems::Problems(std::vector<std::string> found)
    : Status{ErrorCode::invalid_argument, ""}, list(std::move(found)) {
  for (const auto& problem : list) {
    if (!message.empty()) message += '\n';
    message += problem;
  }
}

std::string to_string(const Status& status) {
  return std::string(error_code_name(status.code)) + ": " + status.message;
}

std::ostream& operator<<(std::ostream& out, const Status& status) {
  return out << to_string(status);
}

ErrorCode error_code_of_errno(int error_number) {
  switch (error_number) {
    case ENOENT:
    case ENOTDIR:
      return ErrorCode::not_found;
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case EDQUOT:
      return ErrorCode::resource_exhausted;
    case EACCES:
    case EPERM:
    case EROFS:
      return ErrorCode::failed_precondition;
    case EAGAIN:
    case EBUSY:
      return ErrorCode::unavailable;
    default:
      return ErrorCode::internal;
  }
}

}  // namespace forktrial
