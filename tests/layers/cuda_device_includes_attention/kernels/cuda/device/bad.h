#pragma once
// A fixture of tests/CMakeLists.txt's layer tests: the CUDA device plumbing reaching up into attention must fail.
#include "kernels/cuda/attention/attention.h"
