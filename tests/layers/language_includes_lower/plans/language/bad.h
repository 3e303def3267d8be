#pragma once
// A fixture of tests/CMakeLists.txt's layer tests: the plan language reaching up into the lowering must fail.
#include "plans/lower/lower.h"
