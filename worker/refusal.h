// Why the worker's cache refused a request: an outcome the caller is expected
// to handle (fetch again, back off, report to the coordinator), so a value,
// never an exception (docs/decisions/0037-error-categories.md).
#pragma once

#include <string>

#include "base/error.h"

namespace forktrial::worker {

struct Refusal {
  ErrorCode code;       // what the caller should do about it (base/error.h)
  std::string message;  // what was refused and why, with the values involved

  friend bool operator==(const Refusal&, const Refusal&) = default;
};

}  // namespace forktrial::worker
