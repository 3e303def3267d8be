#!/usr/bin/env bash
# discovery_check.sh BINARY TESTS_CMAKE_DIR: every test case of a Catch2 executable is a CTest test.
# catch_discover_tests splits the names the executable lists into a CMake list: a name with ';' or ']' in it breaks
# that list, and the tests after it vanish from ctest without an error (a sim suite once registered 211 of its 313
# cases). This compares the executable's own count with the count its discovery file registered.
set -euo pipefail
bin=$1
dir=$2
name=$(basename "$bin")
listed=$("$bin" --list-test-names-only | grep -c . || true)
# The discovery file is rewritten after every link; its name carries a hash of the discovery's arguments, so an
# older one may lie beside it: the newest is this build's.
file=$(ls -t "$dir/${name}_tests-"*.cmake 2>/dev/null | head -1 || true)
[ -n "$file" ] || { echo "discovery_check: no $dir/${name}_tests-*.cmake (catch_discover_tests' output)" >&2; exit 1; }
registered=$(grep -c '^add_test(' "$file" || true)
if [ "$listed" != "$registered" ]; then
  echo "discovery_check: $name lists $listed test cases, ctest registered $registered: a test name with ';', '[' or ']'" \
    "breaks catch_discover_tests; rename it" >&2
  exit 1
fi
echo "discovery_check: $name: $listed test cases, all registered"
