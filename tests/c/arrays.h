/* Arrays in a file, as tests/test_c_embed.py and benchmarks/bench_c.py write them: a uint32
 * count, then per array a uint32 irgrad_dtype, a uint32 rank, int64 dimensions, a uint64 byte
 * count and the bytes (native byte order). */
#ifndef IRGRAD_TEST_ARRAYS_H_
#define IRGRAD_TEST_ARRAYS_H_

#include <stdio.h>
#include <stdlib.h>

#include "irgrad.h"

/* Reads at most `max` arrays from `path` into `arrays` (data malloc'ed); their count, or -1. */
static inline int read_arrays(const char* path, irgrad_array* arrays, uint32_t max) {
  FILE* in = fopen(path, "rb");
  uint32_t count = 0;
  int ok = in && fread(&count, 4, 1, in) == 1 && count <= max;
  for (uint32_t i = 0; ok && i < count; ++i) {
    uint32_t dtype = 0, rank = 0;
    uint64_t bytes = 0;
    ok = fread(&dtype, 4, 1, in) == 1 && fread(&rank, 4, 1, in) == 1 && rank <= IRGRAD_MAX_RANK &&
         fread(arrays[i].shape, 8, rank, in) == rank && fread(&bytes, 8, 1, in) == 1 &&
         (arrays[i].data = malloc(bytes + 1)) != NULL && fread(arrays[i].data, 1, bytes, in) == bytes;
    arrays[i].dtype = (irgrad_dtype)dtype;
    arrays[i].rank = (int32_t)rank;
    arrays[i].byte_size = bytes;
  }
  if (in) fclose(in);
  return ok ? (int)count : -1;
}

#endif /* IRGRAD_TEST_ARRAYS_H_ */
