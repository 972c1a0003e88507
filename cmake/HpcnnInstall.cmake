# `cmake --install BUILD [--prefix PREFIX]`: the toolkit laid out as HPC sites install software.
#
#   bin/                      the tools; hpcnn-launch (the cluster launcher, scripts/cluster/launch.py)
#   share/man/man1/TOOL.1     a man page per tool, made at build time from its --help by help2man
#   share/hpcnn/configs/      the example training and cluster configurations (configs/)
#   share/hpcnn/cluster/      the cluster launcher's Python and shell files
#   share/modulefiles/hpcnn/VERSION   a Tcl module file for Lmod and Environment Modules, made at
#                             install time for the prefix installed to:
#                             `module use PREFIX/share/modulefiles; module load hpcnn`
#   lib/libhpcnn_*.a, include/hpcnn/, lib/cmake/hpcnn/   the library as a CMake package:
#                             find_package(hpcnn) gives hpcnn::core, hpcnn::onnx, ... hpcnn::bn
#                             (one target per module, the same one-way graph as lib/CMakeLists.txt)
# tests/cli/test_install.py installs into a temporary prefix and uses each part as a user would.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# ---- man pages --------------------------------------------------------------------------------
set(HPCNN_TOOL_SUMMARIES
  "huffgpu-encode=lossless Huffman encoder with gap arrays (huffgpu format)"
  "huffgpu-decode=decoder of the huffgpu format")
if(NOT HPCNN_CODEC_ONLY)
  list(APPEND HPCNN_TOOL_SUMMARIES
    "prune-rate=derive structured pruning rates from the L1 pruning error and write the smaller ONNX model"
    "sparsify-fcl=replace the first FC layer after the last convolution with a structured sparse one"
    "dist-train=data-parallel training of ONNX CNNs under mpirun"
    "bn-polish=re-estimate BatchNorm statistics on non-augmented training data")
endif()
find_program(HPCNN_HELP2MAN help2man)
if(HPCNN_HELP2MAN)
  set(pages "")
  foreach(entry ${HPCNN_TOOL_SUMMARIES})
    string(REGEX MATCH "^[^=]+" tool "${entry}")
    string(REGEX REPLACE "^[^=]+=" "" summary "${entry}")
    set(page ${CMAKE_BINARY_DIR}/man/${tool}.1)
    add_custom_command(OUTPUT ${page}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
      COMMAND ${HPCNN_HELP2MAN} --no-info --section 1 --name "${summary}" --output ${page} $<TARGET_FILE:${tool}>
      DEPENDS ${tool}
      COMMENT "man page of ${tool} (help2man)" VERBATIM)
    list(APPEND pages ${page})
  endforeach()
  add_custom_target(man_pages ALL DEPENDS ${pages})
  install(FILES ${pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(WARNING "help2man not found (Debian: help2man): no man pages are built or installed")
endif()

# ---- configurations, cluster launcher, module file --------------------------------------------
install(DIRECTORY ${PROJECT_SOURCE_DIR}/configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/hpcnn/configs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/scripts/cluster/ DESTINATION ${CMAKE_INSTALL_DATADIR}/hpcnn/cluster
        USE_SOURCE_PERMISSIONS PATTERN "__pycache__" EXCLUDE)
install(CODE "
  set(launcher \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/hpcnn-launch\")
  message(STATUS \"Installing: \${launcher}\")
  file(CREATE_LINK ../${CMAKE_INSTALL_DATADIR}/hpcnn/cluster/launch.py \"\${launcher}\" SYMBOLIC)
  set(HPCNN_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(HPCNN_VERSION \"${PROJECT_VERSION}\")
  set(module \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATADIR}/modulefiles/hpcnn/${PROJECT_VERSION}\")
  message(STATUS \"Installing: \${module}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/cmake/hpcnn.modulefile.in\" \"\${module}\" @ONLY)
")

# ---- the library as a CMake package ----------------------------------------------------------
if(NOT HPCNN_CODEC_ONLY)
  get_property(targets GLOBAL PROPERTY HPCNN_LIBRARY_TARGETS)
  install(TARGETS ${targets} EXPORT hpcnnTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/lib/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hpcnn FILES_MATCHING PATTERN "*.h")
  install(FILES ${PROJECT_BINARY_DIR}/lib/generated/core/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/hpcnn/core)
  set(cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/hpcnn)
  install(EXPORT hpcnnTargets NAMESPACE hpcnn:: DESTINATION ${cmakedir})
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hpcnnConfig.cmake.in ${CMAKE_BINARY_DIR}/hpcnnConfig.cmake
                                INSTALL_DESTINATION ${cmakedir})
  write_basic_package_version_file(${CMAKE_BINARY_DIR}/hpcnnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
  install(FILES ${CMAKE_BINARY_DIR}/hpcnnConfig.cmake ${CMAKE_BINARY_DIR}/hpcnnConfigVersion.cmake DESTINATION ${cmakedir})
endif()
