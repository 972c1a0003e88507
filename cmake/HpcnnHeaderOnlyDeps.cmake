# Header-only dependencies for the codec-only build, from HPCNN_DEPS_DIR (the Debian packages
# libcli11-dev, libspdlog-dev, libfmt-dev, nlohmann-json3-dev, libxxhash-dev and catch2 unpacked
# with dpkg -x by scripts/fetch-gpu-deps.sh). Defines the same targets as the full build.
if(NOT HPCNN_DEPS_DIR OR NOT EXISTS "${HPCNN_DEPS_DIR}/usr/include/CLI/CLI.hpp")
  message(FATAL_ERROR "HPCNN_CODEC_ONLY needs HPCNN_DEPS_DIR with the unpacked headers (run scripts/fetch-gpu-deps.sh)")
endif()
set(_deps_include "${HPCNN_DEPS_DIR}/usr/include")
add_library(hpcnn_deps_headers INTERFACE)
target_include_directories(hpcnn_deps_headers SYSTEM BEFORE INTERFACE ${_deps_include})
target_compile_definitions(hpcnn_deps_headers INTERFACE FMT_HEADER_ONLY=1 HPCNN_XXHASH_HEADER_ONLY=1)
foreach(_t spdlog::spdlog nlohmann_json::nlohmann_json CLI11::CLI11 Catch2::Catch2)
  add_library(${_t} INTERFACE IMPORTED)
  set_target_properties(${_t} PROPERTIES INTERFACE_LINK_LIBRARIES hpcnn_deps_headers)
endforeach()
set(XXHASH_LIBRARY "")
set(Catch2_FOUND TRUE)
