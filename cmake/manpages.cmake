# manpages.cmake: gpukvd(8) and gpukv(1), made from their --help texts by help2man (Debian:
# help2man) at build time, and installed to share/man. Without help2man the build says so and
# installs none.
find_program(HELP2MAN help2man)
if(NOT HELP2MAN)
  message(STATUS "gpukv: help2man not found: no man pages (Debian: apt install help2man)")
  return()
endif()
set(GKV_MAN_DIR ${CMAKE_BINARY_DIR}/man)
file(MAKE_DIRECTORY ${GKV_MAN_DIR})
add_custom_command(OUTPUT ${GKV_MAN_DIR}/gpukvd.8
  COMMAND ${HELP2MAN} --no-info --section 8 --source "gpukv ${PROJECT_VERSION}"
    --name "key-value store daemon that keeps values in GPU memory"
    --output ${GKV_MAN_DIR}/gpukvd.8 $<TARGET_FILE:gpukvd>
  DEPENDS gpukvd VERBATIM)
add_custom_command(OUTPUT ${GKV_MAN_DIR}/gpukv.1
  COMMAND ${HELP2MAN} --no-info --section 1 --source "gpukv ${PROJECT_VERSION}"
    --help-option=--help-all --name "command-line client of gpukvd"
    --output ${GKV_MAN_DIR}/gpukv.1 $<TARGET_FILE:gpukv_cli>
  DEPENDS gpukv_cli VERBATIM)
add_custom_target(gkv_manpages ALL DEPENDS ${GKV_MAN_DIR}/gpukvd.8 ${GKV_MAN_DIR}/gpukv.1)
install(FILES ${GKV_MAN_DIR}/gpukvd.8 DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
install(FILES ${GKV_MAN_DIR}/gpukv.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
