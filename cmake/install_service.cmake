# install_service.cmake: run by `cmake --install` (install(SCRIPT)): the service files, with
# their paths set for the prefix being installed to (CMAKE_INSTALL_PREFIX at install time, so
# `--prefix P` and CPack's /usr both get files that name their own gpukvd and config):
#   lib/systemd/system/gpukvd.service, lib/sysusers.d/gpukv.conf, lib/tmpfiles.d/gpukv.conf,
#   SYSCONF/gpukv/gpukvd.conf (from the example), SYSCONF/logrotate.d/gpukv,
# where SYSCONF is /etc for the prefix /usr (as GNUInstallDirs has it) and PREFIX/etc otherwise.
# Set before it runs: GKV_DEPLOY_DIR (deploy/ of the source tree), GKV_STAGE_DIR (a directory
# of the build tree where the files are written first).
set(prefix "${CMAKE_INSTALL_PREFIX}")
if(prefix STREQUAL "/usr")
  set(sysconf "/etc")
else()
  set(sysconf "${prefix}/etc")
endif()
set(stage "${GKV_STAGE_DIR}")
file(MAKE_DIRECTORY "${stage}")

# Copies deploy/NAME to the stage as AS, with the checkout's paths replaced by the prefix's.
function(gkv_stage name as)
  file(READ "${GKV_DEPLOY_DIR}/${name}" text)
  string(REPLACE "/usr/local/bin/gpukvd" "${prefix}/bin/gpukvd" text "${text}")
  string(REPLACE "/etc/gpukv" "${sysconf}/gpukv" text "${text}")
  file(WRITE "${stage}/${as}" "${text}")
endfunction()

gkv_stage(gpukvd.service gpukvd.service)
gkv_stage(gpukv.sysusers gpukv-sysusers.conf)
gkv_stage(gpukv.tmpfiles gpukv-tmpfiles.conf)
gkv_stage(gpukvd.conf.example gpukvd.conf)
gkv_stage(gpukv.logrotate gpukv-logrotate)

file(INSTALL "${stage}/gpukvd.service" DESTINATION "${prefix}/lib/systemd/system")
file(INSTALL "${stage}/gpukv-sysusers.conf" DESTINATION "${prefix}/lib/sysusers.d"
  RENAME gpukv.conf)
file(INSTALL "${stage}/gpukv-tmpfiles.conf" DESTINATION "${prefix}/lib/tmpfiles.d"
  RENAME gpukv.conf)
file(INSTALL "${stage}/gpukv-logrotate" DESTINATION "${sysconf}/logrotate.d" RENAME gpukv)
# The config is the example, every setting at its default: an existing one is kept (it is the
# operator's), the example installed beside it.
if(EXISTS "$ENV{DESTDIR}${sysconf}/gpukv/gpukvd.conf")
  file(INSTALL "${stage}/gpukvd.conf" DESTINATION "${sysconf}/gpukv" RENAME gpukvd.conf.example)
else()
  file(INSTALL "${stage}/gpukvd.conf" DESTINATION "${sysconf}/gpukv")
endif()
