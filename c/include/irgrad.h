/* irgrad's C library: run irgrad's artifacts (.vmfb) from C on IREE's runtime.
 *
 * An artifact describes its functions itself (irgrad embeds each function's signature:
 * argument and result names, dtypes, shapes); every call is checked against it before IREE
 * sees it, and every failure returns a status code with a one-line message
 * (irgrad_last_error()), never a crash.
 *
 *   irgrad_module* m;
 *   if (irgrad_module_open_file("mlp.vmfb", NULL, &m) != IRGRAD_OK) {
 *     fprintf(stderr, "%s\n", irgrad_last_error());
 *     return 1;
 *   }
 *   irgrad_function* f;
 *   irgrad_module_function(m, "loss_grad", &f);
 *   irgrad_call(f, args, 6, results, 5);
 *   irgrad_module_close(m);
 *
 * `irgrad header ARTIFACT -o model.h` writes a typed header with one C function per
 * exported function on top of this API (docs/guides/embedding-c.md).
 *
 * Threads: a module and what comes from it are used by one thread at a time; the error
 * message is per thread.
 */
#ifndef IRGRAD_H_
#define IRGRAD_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define IRGRAD_MAX_RANK 16

typedef enum irgrad_status {
  IRGRAD_OK = 0,
  IRGRAD_ERROR_ARGUMENT = 1,   /* a NULL pointer, an unknown option */
  IRGRAD_ERROR_IO = 2,         /* a file cannot be read or written */
  IRGRAD_ERROR_ARTIFACT = 3,   /* not an IREE artifact, damaged, or without irgrad's metadata */
  IRGRAD_ERROR_VERSION = 4,    /* built by an IREE compiler this runtime cannot run */
  IRGRAD_ERROR_DEVICE = 5,     /* unknown driver, or the artifact cannot run on it */
  IRGRAD_ERROR_NOT_FOUND = 6,  /* no function (or training step) of that name */
  IRGRAD_ERROR_COUNT = 7,      /* wrong number of arguments or results */
  IRGRAD_ERROR_DTYPE = 8,      /* an array of the wrong dtype */
  IRGRAD_ERROR_SHAPE = 9,      /* an array of the wrong shape, or a result buffer too small */
  IRGRAD_ERROR_RUNTIME = 10,   /* IREE failed while running the function */
  IRGRAD_ERROR_MEMORY = 11,    /* out of memory */
  IRGRAD_ERROR_CHECKPOINT = 12,/* a checkpoint that is damaged or belongs to another step */
  IRGRAD_ERROR_SIGNATURE = 13, /* a generated header that was made for another artifact */
} irgrad_status;

typedef enum irgrad_dtype {
  IRGRAD_DTYPE_INVALID = 0,
  IRGRAD_FLOAT16 = 1,    /* raw bits, uint16_t */
  IRGRAD_BFLOAT16 = 2,   /* raw bits, uint16_t */
  IRGRAD_FLOAT32 = 3,
  IRGRAD_FLOAT64 = 4,
  IRGRAD_BOOL = 5,       /* one byte, 0 or 1 */
  IRGRAD_INT8 = 6,
  IRGRAD_INT16 = 7,
  IRGRAD_INT32 = 8,
  IRGRAD_INT64 = 9,
  IRGRAD_UINT8 = 10,
  IRGRAD_UINT16 = 11,
  IRGRAD_UINT32 = 12,
  IRGRAD_UINT64 = 13,
  IRGRAD_COMPLEX64 = 14,  /* float real, float imaginary */
  IRGRAD_COMPLEX128 = 15, /* double real, double imaginary */
} irgrad_dtype;

/* A host array: an argument (data is read) or a result (data is written; byte_size is the
 * room there, and rank and shape are set to the result's). Row-major, densely packed. */
typedef struct irgrad_array {
  void* data;
  size_t byte_size;
  irgrad_dtype dtype;
  int32_t rank;
  int64_t shape[IRGRAD_MAX_RANK];
} irgrad_array;

/* One argument or result of a function as the artifact declares it; a dynamic dimension
 * is -1. */
typedef struct irgrad_tensor_info {
  const char* name; /* the producer's name, or "arg<i>" / "result<k>" */
  irgrad_dtype dtype;
  int32_t rank;
  int64_t shape[IRGRAD_MAX_RANK];
} irgrad_tensor_info;

typedef struct irgrad_module irgrad_module;
typedef struct irgrad_function irgrad_function;
typedef struct irgrad_trainer irgrad_trainer;

/* The message of the last call on this thread that did not return IRGRAD_OK ("" if none). */
const char* irgrad_last_error(void);
const char* irgrad_status_name(irgrad_status status);
const char* irgrad_dtype_name(irgrad_dtype dtype); /* "float32", as irgrad and numpy say */
size_t irgrad_dtype_size(irgrad_dtype dtype);       /* bytes per element, 0 if invalid */
/* This runtime: IREE's revision, and the HAL module and VM bytecode versions it runs. */
const char* irgrad_runtime_version(void);

/* Opens an artifact on a device. `driver`: "local-sync" or "local-task"; NULL picks what
 * ig.load picks (local-sync for artifacts of little work per kernel, else local-task).
 * open_bytes reads `data` in place when it is 64-byte aligned (it must then outlive the
 * module), else it copies it. */
irgrad_status irgrad_module_open_file(const char* path, const char* driver, irgrad_module** out);
irgrad_status irgrad_module_open_bytes(const void* data, size_t size, const char* driver,
                                       irgrad_module** out);
void irgrad_module_close(irgrad_module* module); /* NULL is fine */
const char* irgrad_module_driver(const irgrad_module* module);
/* The IREE compiler that built the artifact ("3.13.0rc20261016"), "" if it does not say. */
const char* irgrad_module_compiler(const irgrad_module* module);
size_t irgrad_module_function_count(const irgrad_module* module);
const char* irgrad_module_function_name(const irgrad_module* module, size_t index);
/* The function named `name`; owned by the module. */
irgrad_status irgrad_module_function(irgrad_module* module, const char* name, irgrad_function** out);

const char* irgrad_function_name(const irgrad_function* function);
size_t irgrad_function_arg_count(const irgrad_function* function);
size_t irgrad_function_result_count(const irgrad_function* function);
irgrad_status irgrad_function_arg(const irgrad_function* function, size_t index, irgrad_tensor_info* out);
irgrad_status irgrad_function_result(const irgrad_function* function, size_t index, irgrad_tensor_info* out);
/* Its types, e.g. "(8x4xf32,8x1xf32)->(f32)" (dynamic dimensions are "?"). */
const char* irgrad_function_types(const irgrad_function* function);
/* IRGRAD_ERROR_SIGNATURE unless the function's types are `types` (what a generated header
 * checks when it opens its artifact). */
irgrad_status irgrad_function_check_types(const irgrad_function* function, const char* types);

/* For a training step (@F_train_step, compiled with --train): how many of its arguments are
 * F's parameters, and which (argument indices); how many are optimizer state (its last
 * arguments). 0 for other functions. */
size_t irgrad_function_param_count(const irgrad_function* function);
size_t irgrad_function_param_index(const irgrad_function* function, size_t index);
size_t irgrad_function_state_count(const irgrad_function* function);

/* Calls the function: `args` checked against its signature (count, dtype, shape, bytes),
 * results copied into `results` (dtype checked, room checked, rank and shape set). */
irgrad_status irgrad_call(irgrad_function* function, const irgrad_array* args, size_t n_args,
                          irgrad_array* results, size_t n_results);

/* On-device training with an artifact's @F_train_step (compiled with --train): the
 * parameters and optimizer state stay in device buffers between steps.
 * create: `step` is the training step's name (NULL: the module's only one); `args` are all of
 * F's arguments (parameters and one batch of data), passed to @F_train_init for the state. */
irgrad_status irgrad_trainer_create(irgrad_module* module, const char* step, const irgrad_array* args,
                                    size_t n_args, irgrad_trainer** out);
void irgrad_trainer_free(irgrad_trainer* trainer); /* NULL is fine */
size_t irgrad_trainer_data_count(const irgrad_trainer* trainer);   /* F's arguments that are data */
size_t irgrad_trainer_param_count(const irgrad_trainer* trainer);
size_t irgrad_trainer_state_count(const irgrad_trainer* trainer);
size_t irgrad_trainer_result_count(const irgrad_trainer* trainer); /* F's results */
const char* irgrad_trainer_param_name(const irgrad_trainer* trainer, size_t index);
const char* irgrad_trainer_state_name(const irgrad_trainer* trainer, size_t index);
/* One optimizer step on `data` (F's arguments that are not parameters, in order); F's results
 * into `results`. */
irgrad_status irgrad_trainer_step(irgrad_trainer* trainer, const irgrad_array* data, size_t n_data,
                                  irgrad_array* results, size_t n_results);
/* The parameters / optimizer state, copied to the host. */
irgrad_status irgrad_trainer_params(irgrad_trainer* trainer, irgrad_array* out, size_t n);
irgrad_status irgrad_trainer_state(irgrad_trainer* trainer, irgrad_array* out, size_t n);
/* Parameters and state to `path`: all of it or, if interrupted, nothing (a temporary file in
 * the same folder, flushed, renamed over the old one). restore refuses a file that is damaged
 * (checksum) or belongs to another training step before anything reaches the device. */
irgrad_status irgrad_trainer_save(irgrad_trainer* trainer, const char* path);
irgrad_status irgrad_trainer_restore(irgrad_trainer* trainer, const char* path);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* IRGRAD_H_ */
