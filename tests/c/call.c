/* tests/test_c_embed.py: calls one function of an artifact through irgrad's C library.
 *
 *   call ARTIFACT FUNCTION DRIVER ARGS.bin RESULTS.bin
 *
 * ARGS.bin / RESULTS.bin: arrays.h's format. Prints the status and message on failure (exit 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrays.h"
#include "irgrad.h"

#define MAX 256
#define DYNAMIC_ROOM (1u << 24)

int main(int argc, char** argv) {
  if (argc != 6) return 2;
  static irgrad_array args[MAX], results[MAX];
  int read = read_arrays(argv[4], args, MAX);
  if (read < 0) return 2;
  uint32_t count = (uint32_t)read;
  irgrad_module* m = NULL;
  irgrad_function* f = NULL;
  irgrad_status s = irgrad_module_open_file(argv[1], argv[3], &m);
  if (s == IRGRAD_OK) s = irgrad_module_function(m, argv[2], &f);
  size_t n = f ? irgrad_function_result_count(f) : 0;
  for (size_t k = 0; s == IRGRAD_OK && k < n && k < MAX; ++k) {
    irgrad_tensor_info info;
    irgrad_function_result(f, k, &info);
    size_t bytes = irgrad_dtype_size(info.dtype);
    for (int32_t d = 0; d < info.rank; ++d) bytes = info.shape[d] < 0 ? DYNAMIC_ROOM : bytes * (size_t)info.shape[d];
    results[k].dtype = info.dtype;
    results[k].byte_size = bytes;
    results[k].data = malloc(bytes + 1);
  }
  if (s == IRGRAD_OK) s = irgrad_call(f, args, count, results, n);
  if (s != IRGRAD_OK) {
    printf("%s %s\n", irgrad_status_name(s), irgrad_last_error());
    return 1;
  }
  FILE* out = fopen(argv[5], "wb");
  uint32_t n32 = (uint32_t)n;
  fwrite(&n32, 4, 1, out);
  for (size_t k = 0; k < n; ++k) {
    uint32_t dtype = (uint32_t)results[k].dtype, rank = (uint32_t)results[k].rank;
    size_t bytes = irgrad_dtype_size(results[k].dtype);
    for (int32_t d = 0; d < results[k].rank; ++d) bytes *= (size_t)results[k].shape[d];
    uint64_t b64 = bytes;
    fwrite(&dtype, 4, 1, out);
    fwrite(&rank, 4, 1, out);
    fwrite(results[k].shape, 8, rank, out);
    fwrite(&b64, 8, 1, out);
    fwrite(results[k].data, 1, bytes, out);
  }
  fclose(out);
  irgrad_module_close(m);
  printf("IRGRAD_OK\n");
  return 0;
}
