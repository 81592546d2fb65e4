# Cross-compiling for 64-bit Arm Linux with Debian's gcc-aarch64-linux-gnu (c/build.sh --aarch64).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_ASM_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
# IREE's CMake project enables C++, but the runtime is C: without g++-aarch64-linux-gnu,
# gcc stands in for the C++ compiler CMake insists on.
find_program(_irgrad_cxx aarch64-linux-gnu-g++)
if(NOT _irgrad_cxx)
  set(CMAKE_CXX_COMPILER aarch64-linux-gnu-gcc)
  set(CMAKE_CXX_COMPILER_WORKS 1)
  set(CMAKE_CXX_COMPILER_FORCED 1)
endif()
