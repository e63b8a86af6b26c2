/* Included before every C and C++ file of a llama.cpp build (CMAKE_ARGS="-DCMAKE_CXX_FLAGS=-include <this file>").
   GCC 12's _tile_loadconfig tells the compiler that `ldtilecfg` reads 8 bytes of the 64-byte tile configuration,
   so the stores of the tile shapes may be dropped and the AMX matmul faults (llama.cpp issue 20824). This
   redeclares it as reading all 64 bytes, as GCC 13's header does. Without AMX enabled it changes nothing. */
#pragma once
#if defined(__x86_64__) && defined(__AMX_TILE__)
#include <immintrin.h>
#undef _tile_loadconfig
#define _tile_loadconfig(config) __asm__ volatile("ldtilecfg\t%X0" ::"m"(*(const unsigned char(*)[64])(config)))
#endif
