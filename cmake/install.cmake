# install() + exported package config: find_package(snug) then snug::snug.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)
install(TARGETS snug EXPORT snugTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(dir core autograd memory nn data snug)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION include/snug/${dir}
    FILES_MATCHING PATTERN "*.h")
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/snug/snug.h DESTINATION include/snug)
install(EXPORT snugTargets NAMESPACE snug:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/snug)
configure_package_config_file(cmake/snugConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/snugConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/snug)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/snugConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/snugConfig.cmake
  ${CMAKE_CURRENT_BINARY_DIR}/snugConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/snug)
