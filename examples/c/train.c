/* On-device training from C: an artifact's @F_train_init and @F_train_step (irgrad compile
 * --train sgd|momentum|adam), the parameters and optimizer state kept on the device between
 * steps, a checkpoint written atomically and resumed.
 *
 *   train ARTIFACT PARAMS DATA CHECKPOINT STEPS [--driver D] [--every K] [--losses FILE]
 *         [--params-out FILE]
 *
 * PARAMS: the initial parameters, raw (native byte order, row-major), in the training step's
 *   parameter order. Ignored when CHECKPOINT exists.
 * DATA: batches of F's other arguments, raw, one after another (each batch: the arguments in
 *   order); step k trains on batch k mod (the number of batches).
 * CHECKPOINT: resumed when it exists (its step counter says where training stands), written
 *   every K steps (--every) and at the end.
 * STEPS: train until the step counter reaches STEPS.
 * --losses: F's results of each step run, raw, appended. --params-out: the final parameters.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "irgrad.h"

#define MAX_ARGS 64

/* What the program holds, released by finish() on every way out. */
static irgrad_module* module = NULL;
static irgrad_trainer* trainer = NULL;
static unsigned char *data = NULL, *params = NULL, *results_room = NULL, *room = NULL;
static FILE* losses = NULL;

static int finish(int status) {
  if (losses) fclose(losses);
  free(room);
  free(results_room);
  free(params);
  free(data);
  irgrad_trainer_free(trainer);
  irgrad_module_close(module);
  return status;
}

static int fail(void) {
  fprintf(stderr, "train: %s\n", irgrad_last_error());
  return finish(1);
}

static size_t info_bytes(const irgrad_tensor_info* info) {
  size_t bytes = irgrad_dtype_size(info->dtype);
  for (int32_t d = 0; d < info->rank; ++d) bytes *= (size_t)info->shape[d];
  return bytes;
}

static irgrad_array array_of(const irgrad_tensor_info* info, void* data) {
  irgrad_array a;
  memset(&a, 0, sizeof(a));
  a.data = data;
  a.byte_size = info_bytes(info);
  a.dtype = info->dtype;
  a.rank = info->rank;
  memcpy(a.shape, info->shape, sizeof(a.shape));
  return a;
}

static unsigned char* read_file(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  unsigned char* data = NULL;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)n + 1)) != NULL) {
      if (fread(data, 1, (size_t)n, f) != (size_t)n) {
        free(data);
        data = NULL;
      }
      *size = (size_t)n;
    }
  }
  fclose(f);
  return data;
}

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: train ARTIFACT PARAMS DATA CHECKPOINT STEPS [--driver D] [--every K] "
                    "[--losses FILE] [--params-out FILE]\n");
    return 2;
  }
  const char *artifact = argv[1], *params_path = argv[2], *data_path = argv[3], *checkpoint = argv[4];
  long steps = atol(argv[5]), every = 0;
  const char *driver = NULL, *losses_path = NULL, *params_out = NULL;
  for (int i = 6; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--driver") == 0) driver = argv[i + 1];
    else if (strcmp(argv[i], "--every") == 0) every = atol(argv[i + 1]);
    else if (strcmp(argv[i], "--losses") == 0) losses_path = argv[i + 1];
    else if (strcmp(argv[i], "--params-out") == 0) params_out = argv[i + 1];
    else {
      fprintf(stderr, "train: unknown option %s\n", argv[i]);
      return 2;
    }
  }

  if (irgrad_module_open_file(artifact, driver, &module) != IRGRAD_OK) return fail();
  /* The training step: the artifact's one function named F_train_step. */
  irgrad_function* step = NULL;
  for (size_t i = 0; i < irgrad_module_function_count(module); ++i) {
    const char* name = irgrad_module_function_name(module, i);
    size_t n = strlen(name);
    if (n > 11 && strcmp(name + n - 11, "_train_step") == 0) irgrad_module_function(module, name, &step);
  }
  if (!step) {
    fprintf(stderr, "train: %s has no training step (compile it with --train)\n", artifact);
    return finish(1);
  }
  size_t n_args = irgrad_function_arg_count(step) - irgrad_function_state_count(step);
  size_t n_params = irgrad_function_param_count(step);
  size_t n_results = irgrad_function_result_count(step) - n_params - irgrad_function_state_count(step);
  if (n_args > MAX_ARGS || n_results > MAX_ARGS) {
    fprintf(stderr, "train: more than %d arguments or results\n", MAX_ARGS);
    return finish(1);
  }
  irgrad_tensor_info infos[MAX_ARGS];
  int is_param[MAX_ARGS] = {0};
  size_t param_bytes = 0, batch_bytes = 0, result_bytes = 0;
  for (size_t p = 0; p < n_params; ++p) is_param[irgrad_function_param_index(step, p)] = 1;
  for (size_t i = 0; i < n_args; ++i) {
    irgrad_function_arg(step, i, &infos[i]);
    for (int32_t d = 0; d < infos[i].rank; ++d) {
      if (infos[i].shape[d] < 0) {
        fprintf(stderr, "train: argument %s has a dynamic shape; this example reads static batches\n", infos[i].name);
        return finish(1);
      }
    }
    *(is_param[i] ? &param_bytes : &batch_bytes) += info_bytes(&infos[i]);
  }
  irgrad_tensor_info result_infos[MAX_ARGS];
  for (size_t k = 0; k < n_results; ++k) {
    irgrad_function_result(step, k, &result_infos[k]);
    result_bytes += info_bytes(&result_infos[k]);
  }

  size_t data_size = 0, params_size = 0;
  data = read_file(data_path, &data_size);
  if (!data || !batch_bytes || data_size % batch_bytes || !data_size) {
    fprintf(stderr, "train: %s: expected whole batches of %zu bytes\n", data_path, batch_bytes);
    return finish(1);
  }
  size_t n_batches = data_size / batch_bytes;
  params = read_file(params_path, &params_size);
  if (!params || params_size != param_bytes) {
    fprintf(stderr, "train: %s: expected %zu bytes of parameters\n", params_path, param_bytes);
    return finish(1);
  }

  /* F's arguments for @F_train_init: the parameters, and the first batch. */
  irgrad_array args[MAX_ARGS];
  for (size_t i = 0, p = 0, b = 0; i < n_args; ++i) {
    size_t bytes = info_bytes(&infos[i]);
    args[i] = array_of(&infos[i], is_param[i] ? params + p : data + b);
    *(is_param[i] ? &p : &b) += bytes;
  }
  if (irgrad_trainer_create(module, irgrad_function_name(step), args, n_args, &trainer) != IRGRAD_OK) {
    return fail();
  }
  long done = 0;
  if (access(checkpoint, F_OK) == 0) {
    if (irgrad_trainer_restore(trainer, checkpoint) != IRGRAD_OK) return fail();
    /* The step counter: the state's "step" (an int32 scalar). */
    int32_t counter = 0;
    irgrad_array state[MAX_ARGS];
    size_t n_state = irgrad_trainer_state_count(trainer);
    size_t state_bytes = 0;
    for (size_t s = 0; s < n_state && s < MAX_ARGS; ++s) {
      irgrad_tensor_info info;
      irgrad_function_arg(step, n_args + s, &info);
      state_bytes += info_bytes(&info);
    }
    room = malloc(state_bytes + 1);
    for (size_t s = 0, at = 0; room && s < n_state && s < MAX_ARGS; ++s) {
      irgrad_tensor_info info;
      irgrad_function_arg(step, n_args + s, &info);
      state[s] = array_of(&info, room + at);
      at += info_bytes(&info);
    }
    if (!room) return finish(1);
    if (irgrad_trainer_state(trainer, state, n_state) != IRGRAD_OK) return fail();
    if (n_state && strcmp(irgrad_trainer_state_name(trainer, 0), "step") == 0) memcpy(&counter, room, 4);
    done = counter;
    printf("resumed %s at step %ld\n", checkpoint, done);
  }

  losses = losses_path ? fopen(losses_path, "ab") : NULL;
  results_room = malloc(result_bytes + 1);
  if (!results_room) return finish(1);
  irgrad_array data_args[MAX_ARGS], results[MAX_ARGS];
  for (; done < steps; ++done) {
    const unsigned char* batch = data + (size_t)(done % (long)n_batches) * batch_bytes;
    size_t n_data = 0, b = 0;
    for (size_t i = 0; i < n_args; ++i) {
      if (is_param[i]) continue;
      data_args[n_data++] = array_of(&infos[i], (void*)(batch + b));
      b += info_bytes(&infos[i]);
    }
    for (size_t k = 0, r = 0; k < n_results; ++k) {
      results[k] = array_of(&result_infos[k], results_room + r);
      r += info_bytes(&result_infos[k]);
    }
    if (irgrad_trainer_step(trainer, data_args, n_data, results, n_results) != IRGRAD_OK) return fail();
    if (losses) fwrite(results_room, 1, result_bytes, losses);
    if (n_results && result_infos[0].dtype == IRGRAD_FLOAT32 && result_infos[0].rank == 0) {
      printf("step %ld loss %.9g\n", done + 1, (double)*(float*)results_room);
    }
    if (every > 0 && (done + 1) % every == 0 && irgrad_trainer_save(trainer, checkpoint) != IRGRAD_OK) {
      return fail();
    }
  }
  if (losses) fclose(losses);
  losses = NULL;
  if (irgrad_trainer_save(trainer, checkpoint) != IRGRAD_OK) return fail();
  if (params_out) {
    irgrad_array out[MAX_ARGS];
    for (size_t p = 0, at = 0; p < n_params; ++p) {
      const irgrad_tensor_info* info = &infos[irgrad_function_param_index(step, p)];
      out[p] = array_of(info, params + at);
      at += info_bytes(info);
    }
    if (irgrad_trainer_params(trainer, out, n_params) != IRGRAD_OK) return fail();
    FILE* f = fopen(params_out, "wb");
    int written = f && fwrite(params, 1, param_bytes, f) == param_bytes;
    if (!f || fclose(f) != 0 || !written) {
      fprintf(stderr, "train: cannot write %s\n", params_out);
      return finish(1);
    }
  }
  return finish(0);
}
