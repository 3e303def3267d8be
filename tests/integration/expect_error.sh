#!/bin/sh
# expect_error.sh REGEX COMMAND...: COMMAND must fail the way bad input must (one line matching REGEX on stderr,
# nothing on stdout, exit 2). Prints the output either way, for the ctest log.
regex="$1"; shift
err=$(mktemp); out=$("$@" 2>"$err"); rc=$?
msg=$(cat "$err"); rm -f "$err"
printf 'stdout: %s\nstderr: %s\n' "$out" "$msg"
[ "$rc" -eq 2 ] || { echo "expect_error.sh: exit code $rc, expected 2" >&2; exit 1; }
[ -z "$out" ] || { echo "expect_error.sh: expected nothing on stdout" >&2; exit 1; }
[ "$(printf '%s\n' "$msg" | wc -l)" -eq 1 ] || { echo "expect_error.sh: expected one line on stderr" >&2; exit 1; }
printf '%s\n' "$msg" | grep -Eq -- "$regex" || { echo "expect_error.sh: stderr does not match /$regex/" >&2; exit 1; }
exit 0
