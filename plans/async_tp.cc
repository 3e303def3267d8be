#include "plans/async_tp.h"

#include "plans/error.h"

namespace tptune {

void apply_async_tp(Program&) { throw Error("async_tp: the rewrite is not implemented yet"); }

}  // namespace tptune
