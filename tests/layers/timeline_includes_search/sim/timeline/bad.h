#pragma once
// A fixture of tests/CMakeLists.txt's layer tests: the timeline reaching up into the search that uses it must fail.
#include "sim/search/search.h"
