# Sanitizers for every target of the build: -DTPTUNE_SANITIZE=address,undefined (any -fsanitize= list; empty: none).
# .ci/run builds and tests the whole suite this way in build-asan (see there for the build type and flags chosen to
# keep it fast). Undefined behaviour is fatal (-fno-sanitize-recover=undefined), so a test cannot pass over it.
#
# The tests get their runtime options from TPTUNE_SANITIZER_ENV (tests/CMakeLists.txt and tests/integration/ add it
# to every test's ENVIRONMENT, and mpirun forwards it to every rank with -x): leak detection stays on, with Open MPI's
# own leaks suppressed by tests/sanitizers/lsan.supp.
set(TPTUNE_SANITIZE "" CACHE STRING "Sanitizers for every target, e.g. address,undefined (empty: none)")
set(TPTUNE_SANITIZER_ENV "")
set(TPTUNE_SANITIZER_MPIRUN_FLAGS "")
if(TPTUNE_SANITIZE)
  set(TPTUNE_sanitize_flags -fsanitize=${TPTUNE_SANITIZE} -fno-omit-frame-pointer)
  if(TPTUNE_SANITIZE MATCHES "undefined")
    list(APPEND TPTUNE_sanitize_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${TPTUNE_sanitize_flags})
  add_link_options(-fsanitize=${TPTUNE_SANITIZE})
  message(STATUS "tptune: sanitizers ${TPTUNE_SANITIZE}")

  set(TPTUNE_sanitizer_dir ${CMAKE_SOURCE_DIR}/tests/sanitizers)
  # detect_leaks is on by default on x86-64 Linux; said here so that nobody reads the suppressions as "leaks off".
  # fast_unwind_on_malloc=0: Open MPI is built without frame pointers, so the fast unwinder stops one frame above
  # malloc in an "<unknown module>" and no suppression can name it; the slow (DWARF) unwinder reaches the Open MPI
  # library frames that lsan.supp names.
  set(TPTUNE_SANITIZER_ENV
      "ASAN_OPTIONS=detect_leaks=1:fast_unwind_on_malloc=0:strict_string_checks=1:check_initialization_order=1"
      "LSAN_OPTIONS=suppressions=${TPTUNE_sanitizer_dir}/lsan.supp:print_suppressions=0"
      "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=${TPTUNE_sanitizer_dir}/ubsan.supp")
  set(TPTUNE_SANITIZER_MPIRUN_FLAGS -x ASAN_OPTIONS -x LSAN_OPTIONS -x UBSAN_OPTIONS)
endif()
