#pragma once
// A fixture of tests/CMakeLists.txt's layer tests: the plan language's top reaching up into resolve/ must fail.
#include "plans/language/resolve/shrink.h"
