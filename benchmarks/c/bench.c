/* benchmarks/bench_c.py's C side: the per-call cost of one function, or of one training step,
 * through irgrad's C library.
 *
 *   bench call|train ARTIFACT FUNCTION DRIVER ARGS.bin ROUNDS CALLS
 *
 * ARGS.bin: tests/c/arrays.h's format (the function's arguments; for train, F's arguments:
 * parameters and one batch). Prints the median over ROUNDS of the time per call of blocks of
 * CALLS calls, in microseconds, after a warm-up; results are copied to the host every call. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "arrays.h" /* tests/c/arrays.h */
#include "irgrad.h"

#define MAX 64

static irgrad_array args[MAX], results[MAX];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static int fail(void) {
  fprintf(stderr, "bench: %s\n", irgrad_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 8) return 2;
  int train = strcmp(argv[1], "train") == 0;
  int rounds = atoi(argv[6]), calls = atoi(argv[7]);
  int read = read_arrays(argv[5], args, MAX);
  if (read < 0 || rounds < 1 || rounds > 1000) return 2;
  uint32_t count = (uint32_t)read;
  irgrad_module* m = NULL;
  irgrad_function* f = NULL;
  if (irgrad_module_open_file(argv[2], argv[4], &m) != IRGRAD_OK) return fail();
  if (irgrad_module_function(m, argv[3], &f) != IRGRAD_OK) return fail();
  irgrad_trainer* t = NULL;
  irgrad_array data[MAX];
  size_t n_data = 0, n_results = irgrad_function_result_count(f);
  if (train) {
    if (irgrad_trainer_create(m, argv[3], args, count, &t) != IRGRAD_OK) return fail();
    n_results = irgrad_trainer_result_count(t);
    for (size_t i = 0; i < count; ++i) {
      int param = 0;
      for (size_t p = 0; p < irgrad_function_param_count(f); ++p) param |= irgrad_function_param_index(f, p) == i;
      if (!param) data[n_data++] = args[i];
    }
  }
  for (size_t k = 0; k < n_results; ++k) {
    irgrad_tensor_info info;
    irgrad_function_result(f, k, &info);
    results[k].dtype = info.dtype;
    results[k].byte_size = irgrad_dtype_size(info.dtype);
    for (int32_t d = 0; d < info.rank; ++d) results[k].byte_size *= (size_t)info.shape[d];
    results[k].data = malloc(results[k].byte_size + 1);
  }
  double* times = calloc((size_t)rounds, sizeof(double));
  for (int r = -1; r < rounds; ++r) { /* round -1: the warm-up */
    double t0 = now();
    for (int c = 0; c < calls; ++c) {
      irgrad_status s = train ? irgrad_trainer_step(t, data, n_data, results, n_results)
                              : irgrad_call(f, args, count, results, n_results);
      if (s != IRGRAD_OK) return fail();
    }
    if (r >= 0) times[r] = (now() - t0) / calls;
  }
  qsort(times, (size_t)rounds, sizeof(double), compare);
  printf("%.3f\n", 1e6 * times[rounds / 2]);
  irgrad_trainer_free(t);
  irgrad_module_close(m);
  return 0;
}
