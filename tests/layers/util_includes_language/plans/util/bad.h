#pragma once
// A fixture of tests/CMakeLists.txt's layer tests: the file plumbing reaching up into the plan language must fail.
#include "plans/language/plan.h"
#include "plans/util/error.h"
