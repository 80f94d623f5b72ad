# Cross build for aarch64 (Grace Hopper and other Arm hosts) on a Debian x86-64
# machine: crossbuild-essential-arm64, the :arm64 packages of OpenBLAS and
# libyaml (dpkg multiarch) and sentencepiece's arm64 packages unpacked into
# LL_AARCH64_SYSROOT (they cannot be installed beside the amd64 ones).
# scripts/cross_aarch64.sh sets all of it up; ctest runs the test programs
# under qemu-user.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(LL_AARCH64_SYSROOT "" CACHE PATH "extra root holding unpacked arm64 packages (usr/lib/aarch64-linux-gnu, usr/include)")
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES LL_AARCH64_SYSROOT)
# only arm64 .pc files: the unpacked ones (prefix rewritten by the script) first
set(_ll_pc /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
if(LL_AARCH64_SYSROOT)
  set(_ll_pc ${LL_AARCH64_SYSROOT}/usr/lib/aarch64-linux-gnu/pkgconfig:${_ll_pc})
endif()
set(ENV{PKG_CONFIG_LIBDIR} ${_ll_pc})
set(ENV{PKG_CONFIG_PATH} "")
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu ${LL_AARCH64_SYSROOT} /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
# no -L: the programs load the multiarch arm64 libc (libc6:arm64) through
# /lib/ld-linux-aarch64.so.1; the cross toolchain's own copy under
# /usr/aarch64-linux-gnu is another patch release, and mixing its loader with
# the multiarch libraries hangs threaded programs in pthread_create.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
