# packaging.cmake: a Debian package of the whole installation (gpukvd, gpukv, libgpukv, the header,
# pkg-config and CMake files, man pages, completion, the systemd unit and its entries, the
# logrotate snippet, the config) with CPack: from a Release build with the CUDA runtime linked
# statically (the package then needs only the NVIDIA driver, not a toolkit),
#   cmake -S . -B build-deb -DCMAKE_BUILD_TYPE=Release -DGKV_BUILD_TESTS=OFF \
#       -DGKV_CUDART=cudart_static && cmake --build build-deb
#   cpack --config build-deb/CPackConfig.cmake -G DEB -B OUTDIR
# Its dependencies come from dpkg-shlibdeps; its configuration files are conffiles; after
# installing it creates the gpukv user (systemd-sysusers) and the config directory
# (systemd-tmpfiles) and reloads systemd; it enables nothing.
set(CPACK_PACKAGE_NAME gpukv)
set(CPACK_PACKAGE_VENDOR "the gpukv developers")
set(CPACK_PACKAGE_CONTACT "the gpukv developers <gpukv@users.noreply.github.com>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "key-value store that keeps values in GPU memory")
set(CPACK_PACKAGE_DESCRIPTION "gpukvd keeps binary values in GPU memory under string keys;\
 clients on the machine map them zero-copy. With the gpukv CLI and libgpukv.")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# Files outside the prefix (/etc) are installed through DESTDIR, with the prefix /usr.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION database)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/gpukv/gpukv")
set(GKV_DEB_SCRIPTS ${CMAKE_BINARY_DIR}/deb)
file(MAKE_DIRECTORY ${GKV_DEB_SCRIPTS})
file(WRITE ${GKV_DEB_SCRIPTS}/conffiles
  "/etc/gpukv/gpukvd.conf\n/etc/logrotate.d/gpukv\n")
file(WRITE ${GKV_DEB_SCRIPTS}/postinst "#!/bin/sh
set -e
if [ \"$1\" = configure ]; then
    command -v systemd-sysusers >/dev/null && systemd-sysusers gpukv.conf || true
    command -v systemd-tmpfiles >/dev/null && systemd-tmpfiles --create gpukv.conf || true
    [ -d /run/systemd/system ] && systemctl daemon-reload || true
fi
exit 0
")
file(CHMOD ${GKV_DEB_SCRIPTS}/postinst PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE
  GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA ${GKV_DEB_SCRIPTS}/conffiles ${GKV_DEB_SCRIPTS}/postinst)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
