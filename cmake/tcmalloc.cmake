# gperftools' tcmalloc (the minimal library: malloc only, no profiler) for tp-plan and bench_search. The search
# builds and frees a Program per candidate, and the allocator is a large share of its instructions (bench_search
# measures the difference; the commit that added this file quotes it). Predictions do not change: only the allocator
# does.
#
# -DTPTUNE_TCMALLOC=AUTO (default: when pkg-config finds libtcmalloc_minimal, Debian's libgoogle-perftools-dev),
# ON (required), OFF. Never with sanitizers (ASan brings its own allocator). tp-run, the tests and the callgrind gate
# keep glibc's malloc (the gate's instruction counts stay comparable across machines with and without it).
set(TPTUNE_TCMALLOC AUTO CACHE STRING "Link tp-plan and bench_search with tcmalloc_minimal: AUTO, ON, OFF")
set_property(CACHE TPTUNE_TCMALLOC PROPERTY STRINGS AUTO ON OFF)
add_library(tptune_malloc INTERFACE)  # empty unless tcmalloc is linked
if(NOT TPTUNE_TCMALLOC STREQUAL "OFF" AND NOT TPTUNE_SANITIZE)
  find_package(PkgConfig QUIET)
  if(PkgConfig_FOUND)
    pkg_check_modules(TPTUNE_tcmalloc QUIET IMPORTED_TARGET libtcmalloc_minimal)
  endif()
  if(TPTUNE_tcmalloc_FOUND)
    # --no-as-needed: nothing calls tcmalloc by name; it replaces malloc by being loaded before libc.
    target_link_libraries(tptune_malloc INTERFACE "-Wl,--push-state,--no-as-needed" PkgConfig::TPTUNE_tcmalloc
                                                  "-Wl,--pop-state")
    message(STATUS "tptune: tp-plan and bench_search use tcmalloc_minimal ${TPTUNE_tcmalloc_VERSION}")
  elseif(TPTUNE_TCMALLOC STREQUAL "ON")
    message(FATAL_ERROR "TPTUNE_TCMALLOC=ON but pkg-config finds no libtcmalloc_minimal (libgoogle-perftools-dev)")
  else()
    message(STATUS "tptune: tcmalloc_minimal not found; tp-plan uses the C library's malloc")
  endif()
elseif(TPTUNE_TCMALLOC STREQUAL "ON" AND TPTUNE_SANITIZE)
  message(FATAL_ERROR "TPTUNE_TCMALLOC=ON with sanitizers: ASan needs its own allocator")
endif()
