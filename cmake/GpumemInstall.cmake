# `cmake --install`: the C ABI headers, the libraries, the CLI and an exported
# gpumemConfig.cmake, so a C or C++ program does find_package(gpumem) and links
# gpumem::gpumem (libgpumem.so), gpumem::torch (where built) or gpumem::cupti.
# setup.py installs the same files into a staging folder for the Python wheel.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Headers keep their in-tree paths (#include "hooks/gpumem.h") under include/gpumem, so
# the source tree's internal headers never reach an installed include path.
set(GPUMEM_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/gpumem)
set(GPUMEM_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/gpumem)
set(_gpumem_includes
  "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>;$<INSTALL_INTERFACE:${GPUMEM_INSTALL_INCLUDEDIR}>")

set_target_properties(gpumem_shared PROPERTIES EXPORT_NAME gpumem INSTALL_RPATH "$ORIGIN"
  INTERFACE_INCLUDE_DIRECTORIES "${_gpumem_includes}")
install(FILES hooks/gpumem.h hooks/gpumem_trace.h DESTINATION ${GPUMEM_INSTALL_INCLUDEDIR}/hooks)
set(GPUMEM_INSTALLED_LIBS gpumem_shared)

if(TARGET gpumem_cupti)
  set_target_properties(gpumem_cupti PROPERTIES EXPORT_NAME cupti INSTALL_RPATH "$ORIGIN")
  list(APPEND GPUMEM_INSTALLED_LIBS gpumem_cupti)
endif()

set(GPUMEM_WITH_TORCH OFF)
if(TARGET gpumem_torch)
  set(GPUMEM_WITH_TORCH ON)
  # Replaces the source-tree include folder it exports to the build tree.
  set_target_properties(gpumem_torch PROPERTIES EXPORT_NAME torch INSTALL_RPATH "$ORIGIN"
    INTERFACE_INCLUDE_DIRECTORIES "${_gpumem_includes}")
  install(FILES hooks/torch/install.h DESTINATION ${GPUMEM_INSTALL_INCLUDEDIR}/hooks/torch)
  list(APPEND GPUMEM_INSTALLED_LIBS gpumem_torch)
endif()

install(TARGETS ${GPUMEM_INSTALLED_LIBS} EXPORT gpumemTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS gpumem RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT gpumemTargets NAMESPACE gpumem:: DESTINATION ${GPUMEM_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/gpumemConfig.cmake.in
  ${PROJECT_BINARY_DIR}/gpumemConfig.cmake INSTALL_DESTINATION ${GPUMEM_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gpumemConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gpumemConfig.cmake
  ${PROJECT_BINARY_DIR}/gpumemConfigVersion.cmake DESTINATION ${GPUMEM_INSTALL_CMAKEDIR})

# Everything installed and nothing else (no tests): what setup.py builds.
add_custom_target(gpumem_package)
add_dependencies(gpumem_package gpumem ${GPUMEM_INSTALLED_LIBS})
