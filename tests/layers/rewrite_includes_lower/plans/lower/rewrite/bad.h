#pragma once
// A fixture of tests/CMakeLists.txt's layer tests: a Program rewrite reaching up into the tracer must fail.
#include "plans/lower/layers.h"
