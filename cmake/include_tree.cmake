# SPDX-License-Identifier: MIT
# NOTE [ Include paths ]
# Every header of snug is included as <snug/<folder>/<file>.h>, in the
# library's own sources as in a user's program, so that a consumer's include
# path holds one folder with one `snug/` in it and no bare core/, nn/, ...
#   installed:  <prefix>/include/snug/{core,nn,...}/*.h, snug.h, version.h
#   build tree: ${SNUG_INCLUDE_TREE}/snug/<folder> are links to the source
#               folders; snug.h links to snug/snug.h; version.h is generated.
# The source tree keeps its plain layout (core/, nn/, ... at the top).
set(SNUG_HEADER_FOLDERS base core autograd memory nn data parallel prune quant distributed cuda)
set(SNUG_INCLUDE_TREE ${PROJECT_BINARY_DIR}/include)
file(MAKE_DIRECTORY ${SNUG_INCLUDE_TREE}/snug)
foreach(dir ${SNUG_HEADER_FOLDERS})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${dir} ${SNUG_INCLUDE_TREE}/snug/${dir} SYMBOLIC)
endforeach()
file(CREATE_LINK ${PROJECT_SOURCE_DIR}/snug/snug.h ${SNUG_INCLUDE_TREE}/snug/snug.h SYMBOLIC)
configure_file(${PROJECT_SOURCE_DIR}/snug/version.h.in ${SNUG_INCLUDE_TREE}/snug/version.h @ONLY)
