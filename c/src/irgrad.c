/* irgrad's C library on IREE's runtime: see include/irgrad.h. */
#include "irgrad.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* IREE's headers, which this library's -Wall -Wextra -Werror would otherwise judge. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wtype-limits"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-function"
#include "iree/runtime/api.h"
#include "iree/vm/bytecode/isa/isa.h"
#include "iree/vm/bytecode/module.h"
#pragma GCC diagnostic pop

#ifndef IRGRAD_IREE_REVISION
#define IRGRAD_IREE_REVISION "unknown"
#endif

/* ------------------------------------------------------------------------------------------
 * Errors: one message per thread, one line.
 * ---------------------------------------------------------------------------------------- */

static _Thread_local char g_error[2048];

const char* irgrad_last_error(void) { return g_error; }

static irgrad_status fail(irgrad_status status, const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(g_error, sizeof(g_error), format, args);
  va_end(args);
  return status;
}

/* IREE's message of `status` on one line (the status is consumed). */
static void iree_message(iree_status_t status, char* out, size_t capacity) {
  iree_host_size_t length = 0;
  out[0] = 0;
  if (!iree_status_format(status, capacity, out, &length)) {
    snprintf(out, capacity, "%s", iree_status_code_string(iree_status_code(status)));
  }
  iree_status_free(status);
  /* Several lines (annotations): joined with "; ", trailing space dropped. */
  for (char* c = out; *c; ++c) {
    if (*c == '\n') *c = (c[1] == 0) ? 0 : ';';
  }
  size_t n = strlen(out);
  while (n && (out[n - 1] == ' ' || out[n - 1] == ';')) out[--n] = 0;
  /* IREE's source location ("iree/vm/bytecode/archive.c:119: ") says nothing to a user. */
  char* colon = strstr(out, ".c:");
  if (colon && colon - out < 200 && !memchr(out, ' ', (size_t)(colon - out))) {
    char* rest = strstr(colon + 3, ": ");
    if (rest) memmove(out, rest + 2, strlen(rest + 2) + 1);
  }
}

static irgrad_status fail_iree(irgrad_status code, iree_status_t status, const char* format, ...) {
  char message[1024];
  iree_message(status, message, sizeof(message));
  char prefix[1024];
  va_list args;
  va_start(args, format);
  vsnprintf(prefix, sizeof(prefix), format, args);
  va_end(args);
  return fail(code, "%s: %s", prefix, message);
}

const char* irgrad_status_name(irgrad_status status) {
  switch (status) {
    case IRGRAD_OK: return "IRGRAD_OK";
    case IRGRAD_ERROR_ARGUMENT: return "IRGRAD_ERROR_ARGUMENT";
    case IRGRAD_ERROR_IO: return "IRGRAD_ERROR_IO";
    case IRGRAD_ERROR_ARTIFACT: return "IRGRAD_ERROR_ARTIFACT";
    case IRGRAD_ERROR_VERSION: return "IRGRAD_ERROR_VERSION";
    case IRGRAD_ERROR_DEVICE: return "IRGRAD_ERROR_DEVICE";
    case IRGRAD_ERROR_NOT_FOUND: return "IRGRAD_ERROR_NOT_FOUND";
    case IRGRAD_ERROR_COUNT: return "IRGRAD_ERROR_COUNT";
    case IRGRAD_ERROR_DTYPE: return "IRGRAD_ERROR_DTYPE";
    case IRGRAD_ERROR_SHAPE: return "IRGRAD_ERROR_SHAPE";
    case IRGRAD_ERROR_RUNTIME: return "IRGRAD_ERROR_RUNTIME";
    case IRGRAD_ERROR_MEMORY: return "IRGRAD_ERROR_MEMORY";
    case IRGRAD_ERROR_CHECKPOINT: return "IRGRAD_ERROR_CHECKPOINT";
    case IRGRAD_ERROR_SIGNATURE: return "IRGRAD_ERROR_SIGNATURE";
  }
  return "IRGRAD_ERROR_UNKNOWN";
}

const char* irgrad_runtime_version(void) {
  static char version[160];
  if (!version[0]) {
    /* The HAL module's version is the one IREE's hal module registers (modules/hal/module.c);
     * tests/test_c_embed.py checks it against the running module. */
    snprintf(version, sizeof(version), "IREE %s (HAL module %u, VM bytecode %u.%u)", IRGRAD_IREE_REVISION,
             (unsigned)IRGRAD_HAL_MODULE_VERSION, (unsigned)IREE_VM_BYTECODE_VERSION_MAJOR,
             (unsigned)IREE_VM_BYTECODE_VERSION_MINOR);
  }
  return version;
}

/* ------------------------------------------------------------------------------------------
 * Dtypes.
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  const char* name;     /* numpy's */
  const char* spelling; /* MLIR's */
  size_t size;
  iree_hal_element_type_t element_type;
} dtype_info;

static const dtype_info k_dtypes[] = {
    [IRGRAD_DTYPE_INVALID] = {"invalid", "?", 0, IREE_HAL_ELEMENT_TYPE_NONE},
    [IRGRAD_FLOAT16] = {"float16", "f16", 2, IREE_HAL_ELEMENT_TYPE_FLOAT_16},
    [IRGRAD_BFLOAT16] = {"bfloat16", "bf16", 2, IREE_HAL_ELEMENT_TYPE_BFLOAT_16},
    [IRGRAD_FLOAT32] = {"float32", "f32", 4, IREE_HAL_ELEMENT_TYPE_FLOAT_32},
    [IRGRAD_FLOAT64] = {"float64", "f64", 8, IREE_HAL_ELEMENT_TYPE_FLOAT_64},
    [IRGRAD_BOOL] = {"bool", "i1", 1, IREE_HAL_ELEMENT_TYPE_BOOL_8},
    [IRGRAD_INT8] = {"int8", "i8", 1, IREE_HAL_ELEMENT_TYPE_SINT_8},
    [IRGRAD_INT16] = {"int16", "i16", 2, IREE_HAL_ELEMENT_TYPE_SINT_16},
    [IRGRAD_INT32] = {"int32", "i32", 4, IREE_HAL_ELEMENT_TYPE_SINT_32},
    [IRGRAD_INT64] = {"int64", "i64", 8, IREE_HAL_ELEMENT_TYPE_SINT_64},
    [IRGRAD_UINT8] = {"uint8", "ui8", 1, IREE_HAL_ELEMENT_TYPE_UINT_8},
    [IRGRAD_UINT16] = {"uint16", "ui16", 2, IREE_HAL_ELEMENT_TYPE_UINT_16},
    [IRGRAD_UINT32] = {"uint32", "ui32", 4, IREE_HAL_ELEMENT_TYPE_UINT_32},
    [IRGRAD_UINT64] = {"uint64", "ui64", 8, IREE_HAL_ELEMENT_TYPE_UINT_64},
    [IRGRAD_COMPLEX64] = {"complex64", "complex<f32>", 8, IREE_HAL_ELEMENT_TYPE_COMPLEX_FLOAT_64},
    [IRGRAD_COMPLEX128] = {"complex128", "complex<f64>", 16, IREE_HAL_ELEMENT_TYPE_COMPLEX_FLOAT_128},
};
#define N_DTYPES (sizeof(k_dtypes) / sizeof(k_dtypes[0]))

static bool valid_dtype(irgrad_dtype d) { return d > IRGRAD_DTYPE_INVALID && (size_t)d < N_DTYPES; }

const char* irgrad_dtype_name(irgrad_dtype dtype) {
  return valid_dtype(dtype) ? k_dtypes[dtype].name : "invalid";
}

size_t irgrad_dtype_size(irgrad_dtype dtype) { return valid_dtype(dtype) ? k_dtypes[dtype].size : 0; }

static irgrad_dtype dtype_by_name(const char* name) {
  for (size_t i = 1; i < N_DTYPES; ++i) {
    if (strcmp(k_dtypes[i].name, name) == 0) return (irgrad_dtype)i;
  }
  return IRGRAD_DTYPE_INVALID;
}

/* ------------------------------------------------------------------------------------------
 * A small JSON reader, for the metadata irgrad embeds (runtime/vmfb.py): objects, arrays,
 * strings, numbers, true/false/null.
 * ---------------------------------------------------------------------------------------- */

typedef enum { J_NULL, J_BOOL, J_NUMBER, J_STRING, J_ARRAY, J_OBJECT } json_kind;

typedef struct json {
  json_kind kind;
  double number;
  char* string;        /* J_STRING */
  char* key;           /* a member of an object */
  struct json* items;  /* J_ARRAY / J_OBJECT */
  size_t count;
} json;

typedef struct {
  const char* at;
  const char* end;
  int depth;
} json_reader;

static void json_free(json* j) {
  if (!j) return;
  for (size_t i = 0; i < j->count; ++i) json_free(&j->items[i]);
  free(j->items);
  free(j->string);
  free(j->key);
  memset(j, 0, sizeof(*j));
}

static void json_space(json_reader* r) {
  while (r->at < r->end && (*r->at == ' ' || *r->at == '\n' || *r->at == '\r' || *r->at == '\t')) ++r->at;
}

static bool json_value(json_reader* r, json* out);

static bool json_string(json_reader* r, char** out) {
  if (r->at >= r->end || *r->at != '"') return false;
  ++r->at;
  size_t capacity = 16, n = 0;
  char* s = malloc(capacity);
  if (!s) return false;
  while (r->at < r->end && *r->at != '"') {
    char c = *r->at++;
    if (c == '\\') {
      if (r->at >= r->end) break;
      char e = *r->at++;
      unsigned code = 0;
      switch (e) {
        case 'n': c = '\n'; break;
        case 't': c = '\t'; break;
        case 'r': c = '\r'; break;
        case 'b': c = '\b'; break;
        case 'f': c = '\f'; break;
        case 'u':
          if (r->end - r->at < 4) goto bad;
          for (int k = 0; k < 4; ++k) {
            char h = *r->at++;
            code = code * 16 + (unsigned)(h >= '0' && h <= '9' ? h - '0' : (h | 32) >= 'a' && (h | 32) <= 'f'
                                                                             ? (h | 32) - 'a' + 10 : 0);
          }
          c = code < 0x80 ? (char)code : '?'; /* names are ASCII; others need no exact text here */
          break;
        default: c = e;
      }
    }
    if (n + 2 > capacity) {
      capacity *= 2;
      char* grown = realloc(s, capacity);
      if (!grown) goto bad;
      s = grown;
    }
    s[n++] = c;
  }
  if (r->at >= r->end) goto bad;
  ++r->at;
  s[n] = 0;
  *out = s;
  return true;
bad:
  free(s);
  return false;
}

static bool json_list(json_reader* r, json* out, char close, bool keyed) {
  ++r->at;
  json_space(r);
  if (r->at < r->end && *r->at == close) {
    ++r->at;
    return true;
  }
  for (;;) {
    json item;
    memset(&item, 0, sizeof(item));
    char* key = NULL;
    json_space(r);
    if (keyed) {
      if (!json_string(r, &key)) return false;
      json_space(r);
      if (r->at >= r->end || *r->at != ':') {
        free(key);
        return false;
      }
      ++r->at;
    }
    if (!json_value(r, &item)) {
      free(key);
      json_free(&item);
      return false;
    }
    item.key = key;
    json* grown = realloc(out->items, (out->count + 1) * sizeof(json));
    if (!grown) {
      json_free(&item);
      return false;
    }
    out->items = grown;
    out->items[out->count++] = item;
    json_space(r);
    if (r->at < r->end && *r->at == ',') {
      ++r->at;
      continue;
    }
    if (r->at < r->end && *r->at == close) {
      ++r->at;
      return true;
    }
    return false;
  }
}

static bool json_value(json_reader* r, json* out) {
  json_space(r);
  if (r->at >= r->end || ++r->depth > 64) return false;
  bool ok = false;
  char c = *r->at;
  if (c == '{') {
    out->kind = J_OBJECT;
    ok = json_list(r, out, '}', true);
  } else if (c == '[') {
    out->kind = J_ARRAY;
    ok = json_list(r, out, ']', false);
  } else if (c == '"') {
    out->kind = J_STRING;
    ok = json_string(r, &out->string);
  } else if (r->end - r->at >= 4 && memcmp(r->at, "null", 4) == 0) {
    out->kind = J_NULL;
    r->at += 4;
    ok = true;
  } else if (r->end - r->at >= 4 && memcmp(r->at, "true", 4) == 0) {
    out->kind = J_BOOL;
    out->number = 1;
    r->at += 4;
    ok = true;
  } else if (r->end - r->at >= 5 && memcmp(r->at, "false", 5) == 0) {
    out->kind = J_BOOL;
    r->at += 5;
    ok = true;
  } else {
    char buffer[64];
    size_t n = 0;
    while (r->at + n < r->end && n < sizeof(buffer) - 1 && strchr("+-0123456789.eE", r->at[n])) {
      buffer[n] = r->at[n];
      ++n;
    }
    buffer[n] = 0;
    char* stop = NULL;
    out->kind = J_NUMBER;
    out->number = strtod(buffer, &stop);
    ok = n > 0 && stop == buffer + n;
    r->at += n;
  }
  --r->depth;
  return ok;
}

static bool json_parse(const char* text, size_t length, json* out) {
  json_reader r = {text, text + length, 0};
  memset(out, 0, sizeof(*out));
  if (!json_value(&r, out)) {
    json_free(out);
    return false;
  }
  json_space(&r);
  if (r.at != r.end) {
    json_free(out);
    return false;
  }
  return true;
}

static const json* json_get(const json* object, const char* key) {
  if (!object || object->kind != J_OBJECT) return NULL;
  for (size_t i = 0; i < object->count; ++i) {
    if (strcmp(object->items[i].key, key) == 0) return &object->items[i];
  }
  return NULL;
}

static char* copy_string(const char* s) {
  size_t n = strlen(s) + 1;
  char* copy = malloc(n);
  if (copy) memcpy(copy, s, n);
  return copy;
}

/* ------------------------------------------------------------------------------------------
 * Modules and functions.
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  size_t* params;      /* argument indices of the parameters */
  size_t n_params;
  char** param_names;
  char** state_names;
  size_t n_state;
  char* layout;        /* the raw irgrad.train JSON (checkpoints record it) */
} train_layout;

struct irgrad_function {
  irgrad_module* module;
  char* name;
  iree_vm_function_t vm;
  size_t n_in, n_out;
  irgrad_tensor_info* in;
  irgrad_tensor_info* out;
  char* types;
  bool has_call;
  iree_runtime_call_t call;
  train_layout* train; /* a training step's layout, else NULL */
};

struct irgrad_module {
  iree_runtime_instance_t* instance;
  iree_hal_device_t* device;
  iree_runtime_session_t* session;
  iree_vm_module_t* vm_module;
  void* owned;           /* the artifact's bytes when the module holds them */
  char driver[32];
  char* compiler;
  size_t n_functions;
  irgrad_function* functions;
};

static void free_layout(train_layout* t) {
  if (!t) return;
  for (size_t i = 0; i < t->n_params; ++i) free(t->param_names[i]);
  for (size_t i = 0; i < t->n_state; ++i) free(t->state_names[i]);
  free(t->params);
  free(t->param_names);
  free(t->state_names);
  free(t->layout);
  free(t);
}

static void free_infos(irgrad_tensor_info* infos, size_t n) {
  if (!infos) return;
  for (size_t i = 0; i < n; ++i) free((char*)infos[i].name);
  free(infos);
}

void irgrad_module_close(irgrad_module* m) {
  if (!m) return;
  for (size_t i = 0; i < m->n_functions; ++i) {
    irgrad_function* f = &m->functions[i];
    if (f->has_call) iree_runtime_call_deinitialize(&f->call);
    free(f->name);
    free(f->types);
    free_infos(f->in, f->n_in);
    free_infos(f->out, f->n_out);
    free_layout(f->train);
  }
  free(m->functions);
  if (m->session) iree_runtime_session_release(m->session);
  if (m->vm_module) iree_vm_module_release(m->vm_module);
  if (m->device) iree_hal_device_release(m->device);
  if (m->instance) iree_runtime_instance_release(m->instance);
  free(m->owned);
  free(m->compiler);
  free(m);
}

/* Reads a tensor list ("inputs"/"outputs") and its names of a signature. */
static irgrad_status read_tensors(const char* fn, const json* list, const json* names, const char* prefix,
                                  irgrad_tensor_info** out, size_t* count) {
  if (!list || list->kind != J_ARRAY) return fail(IRGRAD_ERROR_ARTIFACT, "%s: its signature has no %ss", fn, prefix);
  irgrad_tensor_info* infos = calloc(list->count ? list->count : 1, sizeof(*infos));
  if (!infos) return fail(IRGRAD_ERROR_MEMORY, "out of memory");
  for (size_t i = 0; i < list->count; ++i) {
    const json* t = &list->items[i];
    const json* shape = json_get(t, "shape");
    const json* dtype = json_get(t, "dtype");
    irgrad_dtype d = dtype && dtype->kind == J_STRING ? dtype_by_name(dtype->string) : IRGRAD_DTYPE_INVALID;
    if (!shape || shape->kind != J_ARRAY || shape->count > IRGRAD_MAX_RANK || d == IRGRAD_DTYPE_INVALID) {
      free_infos(infos, list->count);
      return fail(IRGRAD_ERROR_ARTIFACT, "%s %s %zu: a type this library cannot handle (rank at most %d, dtype %s)",
                  fn, prefix, i, IRGRAD_MAX_RANK, dtype && dtype->kind == J_STRING ? dtype->string : "?");
    }
    infos[i].dtype = d;
    infos[i].rank = (int32_t)shape->count;
    for (size_t k = 0; k < shape->count; ++k) {
      infos[i].shape[k] = shape->items[k].kind == J_NUMBER ? (int64_t)shape->items[k].number : -1;
    }
    const json* name = names && names->kind == J_ARRAY && i < names->count ? &names->items[i] : NULL;
    char fallback[32];
    snprintf(fallback, sizeof(fallback), "%s%zu", strcmp(prefix, "argument") == 0 ? "arg" : "result", i);
    infos[i].name = copy_string(name && name->kind == J_STRING ? name->string : fallback);
    if (!infos[i].name) {
      free_infos(infos, list->count);
      return fail(IRGRAD_ERROR_MEMORY, "out of memory");
    }
  }
  *out = infos;
  *count = list->count;
  return IRGRAD_OK;
}

static void append_type(char* out, size_t capacity, const irgrad_tensor_info* t) {
  size_t n = strlen(out);
  for (int32_t k = 0; k < t->rank; ++k) {
    if (t->shape[k] < 0) {
      n += (size_t)snprintf(out + n, n < capacity ? capacity - n : 0, "?x");
    } else {
      n += (size_t)snprintf(out + n, n < capacity ? capacity - n : 0, "%lldx", (long long)t->shape[k]);
    }
  }
  snprintf(out + n, n < capacity ? capacity - n : 0, "%s", k_dtypes[t->dtype].spelling);
}

static irgrad_status make_types(irgrad_function* f) {
  size_t capacity = 64 + 32 * (f->n_in + f->n_out) * 4;
  char* s = calloc(capacity, 1);
  if (!s) return fail(IRGRAD_ERROR_MEMORY, "out of memory");
  strcat(s, "(");
  for (size_t i = 0; i < f->n_in; ++i) {
    if (i) strcat(s, ",");
    append_type(s, capacity, &f->in[i]);
  }
  strcat(s, ")->(");
  for (size_t i = 0; i < f->n_out; ++i) {
    if (i) strcat(s, ",");
    append_type(s, capacity, &f->out[i]);
  }
  strcat(s, ")");
  f->types = s;
  return IRGRAD_OK;
}

static irgrad_status read_layout(irgrad_function* f, iree_string_view_t text) {
  json j;
  if (!json_parse(text.data, text.size, &j)) return fail(IRGRAD_ERROR_ARTIFACT, "%s: unreadable training layout", f->name);
  irgrad_status status = IRGRAD_OK;
  train_layout* t = calloc(1, sizeof(*t));
  const json* params = json_get(&j, "params");
  const json* names = json_get(&j, "param_names");
  const json* state = json_get(&j, "state");
  if (!t) {
    status = fail(IRGRAD_ERROR_MEMORY, "out of memory");
    goto done;
  }
  if (!params || params->kind != J_ARRAY || !state || state->kind != J_ARRAY) {
    status = fail(IRGRAD_ERROR_ARTIFACT, "%s: a training layout without params or state", f->name);
    goto done;
  }
  t->n_params = params->count;
  t->n_state = state->count;
  t->params = calloc(params->count + 1, sizeof(size_t));
  t->param_names = calloc(params->count + 1, sizeof(char*));
  t->state_names = calloc(state->count + 1, sizeof(char*));
  t->layout = malloc(text.size + 1);
  if (!t->params || !t->param_names || !t->state_names || !t->layout) {
    status = fail(IRGRAD_ERROR_MEMORY, "out of memory");
    goto done;
  }
  memcpy(t->layout, text.data, text.size);
  t->layout[text.size] = 0;
  for (size_t i = 0; i < params->count; ++i) {
    double index = params->items[i].number;
    if (params->items[i].kind != J_NUMBER || index < 0 || (size_t)index >= f->n_in) {
      status = fail(IRGRAD_ERROR_ARTIFACT, "%s: a training layout naming argument %g", f->name, index);
      goto done;
    }
    t->params[i] = (size_t)index;
    const json* name = names && names->kind == J_ARRAY && i < names->count ? &names->items[i] : NULL;
    t->param_names[i] = copy_string(name && name->kind == J_STRING ? name->string : f->in[t->params[i]].name);
  }
  for (size_t i = 0; i < state->count; ++i) {
    t->state_names[i] = copy_string(state->items[i].kind == J_STRING ? state->items[i].string : "state");
  }
  if (t->n_params + t->n_state > f->n_out || t->n_state > f->n_in) {
    status = fail(IRGRAD_ERROR_ARTIFACT, "%s: its training layout does not fit its signature", f->name);
  }
done:
  json_free(&j);
  if (status == IRGRAD_OK) {
    f->train = t;
  } else {
    free_layout(t);
  }
  return status;
}

static irgrad_status read_function(irgrad_module* m, iree_vm_function_t vm, irgrad_function* f) {
  iree_string_view_t name = iree_vm_function_name(&vm);
  f->module = m;
  f->vm = vm;
  f->name = malloc(name.size + 1);
  if (!f->name) return fail(IRGRAD_ERROR_MEMORY, "out of memory");
  memcpy(f->name, name.data, name.size);
  f->name[name.size] = 0;
  iree_string_view_t text = iree_vm_function_lookup_attr_by_name(&vm, IREE_SV("irgrad.signature"));
  if (iree_string_view_is_empty(text)) {
    return fail(IRGRAD_ERROR_ARTIFACT, "function %s carries no irgrad signature: the artifact was not built by "
                "irgrad (run it with iree-run-module, or compile it with irgrad)", f->name);
  }
  json j;
  if (!json_parse(text.data, text.size, &j)) {
    return fail(IRGRAD_ERROR_ARTIFACT, "function %s: its irgrad signature is not valid JSON", f->name);
  }
  irgrad_status status = read_tensors(f->name, json_get(&j, "inputs"), json_get(&j, "arg_names"), "argument",
                                      &f->in, &f->n_in);
  if (status == IRGRAD_OK) {
    status = read_tensors(f->name, json_get(&j, "outputs"), json_get(&j, "result_names"), "result", &f->out,
                          &f->n_out);
  }
  json_free(&j);
  if (status == IRGRAD_OK) status = make_types(f);
  iree_string_view_t train = iree_vm_function_lookup_attr_by_name(&vm, IREE_SV("irgrad.train"));
  if (status == IRGRAD_OK && !iree_string_view_is_empty(train)) status = read_layout(f, train);
  return status;
}

/* Work per kernel up to which ig.load picks local-sync (runtime/loader.py's SYNC_WORK and
 * SYNC_KERNELS): the same default here. */
#define SYNC_WORK (1 << 19)
#define SYNC_KERNELS 8

static void default_driver(const json* artifact, char* out, size_t capacity) {
  const json* target = json_get(artifact, "target");
  const json* work = json_get(artifact, "work");
  const json* kernels = json_get(artifact, "kernels");
  double per_kernel = kernels && kernels->kind == J_NUMBER ? kernels->number : 1;
  if (per_kernel < 1) per_kernel = 1;
  if (per_kernel > SYNC_KERNELS) per_kernel = SYNC_KERNELS;
  bool cpu = target && target->kind == J_STRING && strcmp(target->string, "llvm-cpu") == 0;
  bool small = work && work->kind == J_NUMBER && work->number <= SYNC_WORK * per_kernel;
  snprintf(out, capacity, "%s", cpu && small ? "local-sync" : "local-task");
}

typedef struct {
  iree_vm_context_t* context;
  const char* compiler;
  irgrad_status status;
} version_check;

/* Every module the artifact needs, at the version it needs: checked before IREE links them,
 * so that an artifact from a newer compiler is refused with the versions named. */
static iree_status_t check_dependency(void* user_data, const iree_vm_module_dependency_t* dependency) {
  version_check* check = (version_check*)user_data;
  if (check->status != IRGRAD_OK) return iree_ok_status();
  bool required = (dependency->flags & IREE_VM_MODULE_DEPENDENCY_FLAG_REQUIRED) != 0;
  iree_host_size_t count = iree_vm_context_module_count(check->context);
  for (iree_host_size_t i = 0; i < count; ++i) {
    iree_vm_module_t* module = iree_vm_context_module_at(check->context, i);
    if (!iree_string_view_equal(iree_vm_module_name(module), dependency->name)) continue;
    uint32_t have = iree_vm_module_signature(module).version;
    if (have < dependency->minimum_version && required) {
      check->status = fail(IRGRAD_ERROR_VERSION,
                           "this artifact was built by IREE compiler %s and needs IREE's %.*s module version %u; "
                           "this runtime, %s, has version %u: recompile the artifact with a compiler of this "
                           "runtime's release, or build the runtime from the compiler's release",
                           check->compiler, (int)dependency->name.size, dependency->name.data,
                           (unsigned)dependency->minimum_version, irgrad_runtime_version(), (unsigned)have);
    }
    return iree_ok_status();
  }
  if (required) {
    check->status = fail(IRGRAD_ERROR_VERSION,
                         "this artifact was built by IREE compiler %s and needs IREE's %.*s module, which this "
                         "runtime (%s) does not have", check->compiler, (int)dependency->name.size,
                         dependency->name.data, irgrad_runtime_version());
  }
  return iree_ok_status();
}

/* ------------------------------------------------------------------------------------------
 * The seal: irgrad writes a SHA-256 of the artifact's bytes into its zip comment
 * ("irgrad-sha256:<hex>", runtime/vmfb.py's seal); damage anywhere is refused at open, as
 * ig.load refuses it.
 * ---------------------------------------------------------------------------------------- */

static const uint32_t k_sha[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const unsigned char* p) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
  }
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = ROTR(w[i - 15], 7) ^ ROTR(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROTR(w[i - 2], 17) ^ ROTR(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t t1 = k + (ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25)) + ((e & f) ^ (~e & g)) + k_sha[i] + w[i];
    uint32_t t2 = (ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

static void sha256_hex(const unsigned char* data, size_t n, char out[65]) {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  size_t full = n / 64 * 64;
  for (size_t i = 0; i < full; i += 64) sha256_block(h, data + i);
  unsigned char tail[128] = {0};
  size_t rest = n - full;
  memcpy(tail, data + full, rest);
  tail[rest] = 0x80;
  size_t blocks = rest + 9 > 64 ? 2 : 1;
  uint64_t bits = (uint64_t)n * 8;
  for (int i = 0; i < 8; ++i) tail[blocks * 64 - 1 - i] = (unsigned char)(bits >> (8 * i));
  for (size_t i = 0; i < blocks; ++i) sha256_block(h, tail + 64 * i);
  for (int i = 0; i < 8; ++i) snprintf(out + 8 * i, 9, "%08x", (unsigned)h[i]);
}

/* IRGRAD_OK unless the artifact is sealed and its bytes no longer match the seal. */
static irgrad_status check_seal(const uint8_t* data, size_t size, const char* where) {
  static const char k_prefix[] = "irgrad-sha256:";
  const size_t prefix = sizeof(k_prefix) - 1, comment = prefix + 64;
  if (size < 22 + comment || memcmp(data, "PK\x03\x04", 4) != 0) return IRGRAD_OK;
  size_t at = size - comment - 2; /* the comment's 2-byte length, right before it */
  if (memcmp(data + at + 2, k_prefix, prefix) != 0) return IRGRAD_OK; /* not sealed by irgrad */
  if (at < 20 || memcmp(data + at - 20, "PK\x05\x06", 4) != 0 ||
      (size_t)(data[at] | data[at + 1] << 8) != comment) {
    return fail(IRGRAD_ERROR_ARTIFACT, "%s: not a valid IREE artifact (.vmfb): damaged: its seal (the archive "
                "comment) is broken", where);
  }
  char digest[65];
  sha256_hex(data, at, digest);
  if (memcmp(digest, data + at + 2 + prefix, 64) != 0) {
    return fail(IRGRAD_ERROR_ARTIFACT, "%s: not a valid IREE artifact (.vmfb): damaged: digest mismatch", where);
  }
  return IRGRAD_OK;
}

static bool contains(const char* text, const char* part) { return strstr(text, part) != NULL; }

static irgrad_status open_module(const uint8_t* data, size_t size, void* owned, const char* driver,
                                 const char* where, irgrad_module** out) {
  irgrad_module* m = calloc(1, sizeof(*m));
  if (!m) {
    free(owned);
    return fail(IRGRAD_ERROR_MEMORY, "out of memory");
  }
  m->owned = owned;
  json artifact;
  memset(&artifact, 0, sizeof(artifact));
  irgrad_status status = check_seal(data, size, where);
  if (status != IRGRAD_OK) goto done;
  iree_allocator_t host = iree_allocator_system();
  iree_runtime_instance_options_t options;
  iree_runtime_instance_options_initialize(&options);
  iree_runtime_instance_options_use_all_available_drivers(&options);
  iree_status_t s = iree_runtime_instance_create(&options, host, &m->instance);
  if (!iree_status_is_ok(s)) {
    status = fail_iree(IRGRAD_ERROR_RUNTIME, s, "cannot start IREE's runtime");
    goto done;
  }
  s = iree_vm_bytecode_module_create(iree_runtime_instance_vm_instance(m->instance), IREE_VM_BYTECODE_MODULE_FLAG_NONE,
                                     iree_make_const_byte_span(data, size), iree_allocator_null(), host,
                                     &m->vm_module);
  if (!iree_status_is_ok(s)) {
    char message[1024];
    iree_message(s, message, sizeof(message));
    if (contains(message, "version")) {
      status = fail(IRGRAD_ERROR_VERSION, "%s: built by an IREE compiler whose bytecode this runtime (%s) cannot "
                    "read: %s", where, irgrad_runtime_version(), message);
    } else {
      status = fail(IRGRAD_ERROR_ARTIFACT, "%s: not a valid IREE artifact (.vmfb): %s", where, message);
    }
    goto done;
  }
  /* The functions and their signatures. */
  iree_vm_module_signature_t signature = iree_vm_module_signature(m->vm_module);
  m->functions = calloc(signature.export_function_count + 1, sizeof(irgrad_function));
  if (!m->functions) {
    status = fail(IRGRAD_ERROR_MEMORY, "out of memory");
    goto done;
  }
  for (iree_host_size_t i = 0; i < signature.export_function_count; ++i) {
    iree_vm_function_t vm;
    s = iree_vm_module_lookup_function_by_ordinal(m->vm_module, IREE_VM_FUNCTION_LINKAGE_EXPORT, i, &vm);
    if (!iree_status_is_ok(s)) {
      status = fail_iree(IRGRAD_ERROR_ARTIFACT, s, "%s: function %zu", where, (size_t)i);
      goto done;
    }
    iree_string_view_t name = iree_vm_function_name(&vm);
    if (iree_string_view_starts_with(name, IREE_SV("__"))) continue; /* IREE's own (__init) */
    status = read_function(m, vm, &m->functions[m->n_functions++]);
    if (status != IRGRAD_OK) goto done;
    if (artifact.kind == J_NULL && !artifact.items) {
      iree_string_view_t text = iree_vm_function_lookup_attr_by_name(&vm, IREE_SV("irgrad.artifact"));
      if (!iree_string_view_is_empty(text) && !json_parse(text.data, text.size, &artifact)) {
        status = fail(IRGRAD_ERROR_ARTIFACT, "%s: its irgrad.artifact metadata is not valid JSON", where);
        goto done;
      }
    }
  }
  const json* compiler = json_get(&artifact, "iree_compiler");
  m->compiler = copy_string(compiler && compiler->kind == J_STRING ? compiler->string : "");
  if (!m->compiler) {
    status = fail(IRGRAD_ERROR_MEMORY, "out of memory");
    goto done;
  }
  /* The device. */
  const json* target = json_get(&artifact, "target");
  if (target && target->kind == J_STRING && strcmp(target->string, "llvm-cpu") != 0 &&
      strcmp(target->string, "vmvx") != 0) {
    status = fail(IRGRAD_ERROR_DEVICE, "%s: this artifact was compiled for %s; this runtime runs llvm-cpu artifacts "
                  "(local-sync, local-task): compile for llvm-cpu", where, target->string);
    goto done;
  }
  if (driver) {
    if (strcmp(driver, "local-sync") != 0 && strcmp(driver, "local-task") != 0) {
      status = fail(IRGRAD_ERROR_DEVICE, "unknown device '%s'; drivers: local-sync, local-task", driver);
      goto done;
    }
    snprintf(m->driver, sizeof(m->driver), "%s", driver);
  } else {
    default_driver(&artifact, m->driver, sizeof(m->driver));
  }
  s = iree_runtime_instance_try_create_default_device(m->instance, iree_make_cstring_view(m->driver), &m->device);
  if (!iree_status_is_ok(s)) {
    status = fail_iree(IRGRAD_ERROR_DEVICE, s, "cannot open device '%s'", m->driver);
    goto done;
  }
  iree_runtime_session_options_t session_options;
  iree_runtime_session_options_initialize(&session_options);
  s = iree_runtime_session_create_with_device(m->instance, &session_options, m->device, host, &m->session);
  if (!iree_status_is_ok(s)) {
    status = fail_iree(IRGRAD_ERROR_DEVICE, s, "cannot open a session on '%s'", m->driver);
    goto done;
  }
  version_check check = {iree_runtime_session_context(m->session), m->compiler[0] ? m->compiler : "(unknown)",
                         IRGRAD_OK};
  s = iree_vm_module_enumerate_dependencies(m->vm_module, check_dependency, &check);
  if (!iree_status_is_ok(s)) {
    status = fail_iree(IRGRAD_ERROR_ARTIFACT, s, "%s: its module dependencies", where);
    goto done;
  }
  if (check.status != IRGRAD_OK) {
    status = check.status;
    goto done;
  }
  s = iree_runtime_session_append_module(m->session, m->vm_module);
  if (!iree_status_is_ok(s)) {
    char message[1024];
    iree_message(s, message, sizeof(message));
    if (contains(message, "version")) {
      status = fail(IRGRAD_ERROR_VERSION, "%s: this artifact was built by IREE compiler %s, which this runtime (%s) "
                    "cannot run: %s", where, check.compiler, irgrad_runtime_version(), message);
    } else if (contains(message, "INCOMPATIBLE") || contains(message, "executable")) {
      status = fail(IRGRAD_ERROR_DEVICE, "%s: this artifact's kernels cannot run on this CPU (built for another "
                    "architecture or CPU features, e.g. with --triple or --cpu): recompile it for this machine "
                    "(irgrad compile --cpu generic [--triple ...]): %s", where, message);
    } else {
      status = fail(IRGRAD_ERROR_DEVICE, "%s: cannot run this artifact on '%s': %s", where, m->driver, message);
    }
    goto done;
  }
done:
  json_free(&artifact);
  if (status != IRGRAD_OK) {
    irgrad_module_close(m);
    return status;
  }
  *out = m;
  return IRGRAD_OK;
}

irgrad_status irgrad_module_open_bytes(const void* data, size_t size, const char* driver, irgrad_module** out) {
  if (!out) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_module_open_bytes: out is NULL");
  *out = NULL;
  if (!data || size == 0) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_module_open_bytes: no bytes");
  if (((uintptr_t)data) % 64 == 0) return open_module(data, size, NULL, driver, "artifact bytes", out);
  void* copy = NULL;
  if (posix_memalign(&copy, 64, size) != 0) return fail(IRGRAD_ERROR_MEMORY, "out of memory");
  memcpy(copy, data, size);
  return open_module(copy, size, copy, driver, "artifact bytes", out);
}

irgrad_status irgrad_module_open_file(const char* path, const char* driver, irgrad_module** out) {
  if (!out) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_module_open_file: out is NULL");
  *out = NULL;
  if (!path) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_module_open_file: path is NULL");
  FILE* f = fopen(path, "rb");
  if (!f) return fail(IRGRAD_ERROR_IO, "%s: %s", path, strerror(errno));
  void* data = NULL;
  long size = -1;
  if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
  if (size <= 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return fail(size == 0 ? IRGRAD_ERROR_ARTIFACT : IRGRAD_ERROR_IO, "%s: %s", path,
                size == 0 ? "empty file: not an IREE artifact" : "cannot read it");
  }
  if (posix_memalign(&data, 64, (size_t)size) != 0) {
    fclose(f);
    return fail(IRGRAD_ERROR_MEMORY, "%s: out of memory (%ld bytes)", path, size);
  }
  size_t got = fread(data, 1, (size_t)size, f);
  fclose(f);
  if (got != (size_t)size) {
    free(data);
    return fail(IRGRAD_ERROR_IO, "%s: short read", path);
  }
  return open_module(data, (size_t)size, data, driver, path, out);
}

const char* irgrad_module_driver(const irgrad_module* m) { return m ? m->driver : ""; }
const char* irgrad_module_compiler(const irgrad_module* m) { return m ? m->compiler : ""; }
size_t irgrad_module_function_count(const irgrad_module* m) { return m ? m->n_functions : 0; }
const char* irgrad_module_function_name(const irgrad_module* m, size_t i) {
  return m && i < m->n_functions ? m->functions[i].name : NULL;
}

irgrad_status irgrad_module_function(irgrad_module* m, const char* name, irgrad_function** out) {
  if (!m || !name || !out) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_module_function: a NULL argument");
  *out = NULL;
  for (size_t i = 0; i < m->n_functions; ++i) {
    if (strcmp(m->functions[i].name, name) == 0) {
      *out = &m->functions[i];
      return IRGRAD_OK;
    }
  }
  char names[1024] = "";
  for (size_t i = 0; i < m->n_functions; ++i) {
    size_t n = strlen(names);
    snprintf(names + n, sizeof(names) - n, "%s%s", i ? ", " : "", m->functions[i].name);
  }
  return fail(IRGRAD_ERROR_NOT_FOUND, "no function '%s'; available: %s", name, m->n_functions ? names : "none");
}

const char* irgrad_function_name(const irgrad_function* f) { return f ? f->name : ""; }
size_t irgrad_function_arg_count(const irgrad_function* f) { return f ? f->n_in : 0; }
size_t irgrad_function_result_count(const irgrad_function* f) { return f ? f->n_out : 0; }
const char* irgrad_function_types(const irgrad_function* f) { return f ? f->types : ""; }

static irgrad_status info_at(const irgrad_function* f, size_t i, irgrad_tensor_info* out, bool input) {
  if (!f || !out) return fail(IRGRAD_ERROR_ARGUMENT, "a NULL argument");
  size_t n = input ? f->n_in : f->n_out;
  if (i >= n) return fail(IRGRAD_ERROR_COUNT, "%s has %zu %s", f->name, n, input ? "arguments" : "results");
  *out = (input ? f->in : f->out)[i];
  return IRGRAD_OK;
}

irgrad_status irgrad_function_arg(const irgrad_function* f, size_t i, irgrad_tensor_info* out) {
  return info_at(f, i, out, true);
}
irgrad_status irgrad_function_result(const irgrad_function* f, size_t i, irgrad_tensor_info* out) {
  return info_at(f, i, out, false);
}

size_t irgrad_function_param_count(const irgrad_function* f) { return f && f->train ? f->train->n_params : 0; }
size_t irgrad_function_param_index(const irgrad_function* f, size_t i) {
  return f && f->train && i < f->train->n_params ? f->train->params[i] : 0;
}
size_t irgrad_function_state_count(const irgrad_function* f) { return f && f->train ? f->train->n_state : 0; }

irgrad_status irgrad_function_check_types(const irgrad_function* f, const char* types) {
  if (!f || !types) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_function_check_types: a NULL argument");
  if (strcmp(f->types, types) != 0) {
    return fail(IRGRAD_ERROR_SIGNATURE, "%s is %s in this artifact but %s in the header: the header was generated "
                "for another artifact (run irgrad header again)", f->name, f->types, types);
  }
  return IRGRAD_OK;
}

/* ------------------------------------------------------------------------------------------
 * Calls.
 * ---------------------------------------------------------------------------------------- */

static void format_shape(char* out, size_t capacity, int32_t rank, const int64_t* shape) {
  size_t n = (size_t)snprintf(out, capacity, "(");
  for (int32_t k = 0; k < rank && n < capacity; ++k) {
    if (shape[k] < 0) {
      n += (size_t)snprintf(out + n, capacity - n, "%s?", k ? ", " : "");
    } else {
      n += (size_t)snprintf(out + n, capacity - n, "%s%lld", k ? ", " : "", (long long)shape[k]);
    }
  }
  if (n < capacity) snprintf(out + n, capacity - n, "%s)", rank == 1 ? "," : "");
}

/* Checks one argument against its declared type: dtype, rank, shape, bytes. */
static irgrad_status check_arg(const irgrad_function* f, size_t i, const irgrad_tensor_info* want,
                               const irgrad_array* a, size_t* out_bytes) {
  if (a->dtype != want->dtype) {
    return fail(IRGRAD_ERROR_DTYPE, "%s argument %zu (%s): expected dtype %s, got %s", f->name, i, want->name,
                irgrad_dtype_name(want->dtype), irgrad_dtype_name(a->dtype));
  }
  bool fits = a->rank == want->rank;
  size_t elements = 1;
  if (a->rank < 0 || a->rank > IRGRAD_MAX_RANK) fits = false;
  for (int32_t k = 0; fits && k < a->rank; ++k) {
    if (a->shape[k] < 0 || (want->shape[k] >= 0 && want->shape[k] != a->shape[k])) fits = false;
    /* (a dynamic dimension so large that the byte count overflows fits nowhere) */
    if (a->shape[k] > 0 && elements > SIZE_MAX / 16 / (size_t)a->shape[k]) fits = false;
    elements *= (size_t)(a->shape[k] < 0 ? 0 : a->shape[k]);
  }
  if (!fits) {
    char expected[256], got[256];
    format_shape(expected, sizeof(expected), want->rank, want->shape);
    if (a->rank < 0 || a->rank > IRGRAD_MAX_RANK) {
      snprintf(got, sizeof(got), "rank %d", (int)a->rank);
    } else {
      format_shape(got, sizeof(got), a->rank, a->shape);
    }
    return fail(IRGRAD_ERROR_SHAPE, "%s argument %zu (%s): expected shape %s, got %s", f->name, i, want->name,
                expected, got);
  }
  size_t bytes = elements * k_dtypes[want->dtype].size;
  if (a->byte_size < bytes || (bytes && !a->data)) {
    return fail(IRGRAD_ERROR_SHAPE, "%s argument %zu (%s): its shape needs %zu bytes, the array has %zu%s", f->name,
                i, want->name, bytes, a->byte_size, a->data ? "" : " (data is NULL)");
  }
  *out_bytes = bytes;
  return IRGRAD_OK;
}

static irgrad_status upload(irgrad_function* f, size_t i, const irgrad_array* a, iree_hal_buffer_view_t** out) {
  size_t bytes = 0;
  irgrad_status status = check_arg(f, i, &f->in[i], a, &bytes);
  if (status != IRGRAD_OK) return status;
  iree_hal_dim_t dims[IRGRAD_MAX_RANK];
  for (int32_t k = 0; k < a->rank; ++k) dims[k] = (iree_hal_dim_t)a->shape[k];
  iree_hal_buffer_params_t params = {0};
  params.type = IREE_HAL_MEMORY_TYPE_DEVICE_LOCAL;
  params.usage = IREE_HAL_BUFFER_USAGE_DEFAULT;
  irgrad_module* m = f->module;
  iree_status_t s = iree_hal_buffer_view_allocate_buffer_copy(
      m->device, iree_hal_device_allocator(m->device), (iree_host_size_t)a->rank, dims,
      k_dtypes[a->dtype].element_type, IREE_HAL_ENCODING_TYPE_DENSE_ROW_MAJOR, params,
      iree_make_const_byte_span(a->data, bytes), out);
  if (!iree_status_is_ok(s)) return fail_iree(IRGRAD_ERROR_MEMORY, s, "%s argument %zu: device buffer", f->name, i);
  return IRGRAD_OK;
}

/* Result `k` of the declared types checked against the room the caller gives, before a call:
 * dtype, and bytes where the shape is static. */
static irgrad_status check_result(const irgrad_function* f, size_t k, const irgrad_array* r) {
  const irgrad_tensor_info* want = &f->out[k];
  if (r->dtype != want->dtype) {
    return fail(IRGRAD_ERROR_DTYPE, "%s result %zu (%s): expected dtype %s, got %s", f->name, k, want->name,
                irgrad_dtype_name(want->dtype), irgrad_dtype_name(r->dtype));
  }
  size_t bytes = k_dtypes[want->dtype].size;
  for (int32_t d = 0; d < want->rank; ++d) {
    if (want->shape[d] < 0) return IRGRAD_OK; /* dynamic: checked when it is known */
    bytes *= (size_t)want->shape[d];
  }
  if (r->byte_size < bytes || (bytes && !r->data)) {
    return fail(IRGRAD_ERROR_SHAPE, "%s result %zu (%s): needs %zu bytes, the array has room for %zu", f->name, k,
                want->name, bytes, r->data ? r->byte_size : 0);
  }
  return IRGRAD_OK;
}

static irgrad_status download(irgrad_function* f, size_t k, iree_hal_buffer_view_t* view, irgrad_array* r) {
  size_t rank = iree_hal_buffer_view_shape_rank(view);
  const iree_hal_dim_t* dims = iree_hal_buffer_view_shape_dims(view);
  size_t bytes = (size_t)iree_hal_buffer_view_byte_length(view);
  if (rank > IRGRAD_MAX_RANK) return fail(IRGRAD_ERROR_SHAPE, "%s result %zu: rank %zu", f->name, k, rank);
  if (r->byte_size < bytes || (bytes && !r->data)) {
    return fail(IRGRAD_ERROR_SHAPE, "%s result %zu (%s): needs %zu bytes, the array has room for %zu", f->name, k,
                f->out[k].name, bytes, r->data ? r->byte_size : 0);
  }
  r->rank = (int32_t)rank;
  for (size_t d = 0; d < rank; ++d) r->shape[d] = (int64_t)dims[d];
  if (!bytes) return IRGRAD_OK;
  iree_hal_buffer_t* buffer = iree_hal_buffer_view_buffer(view);
  iree_status_t s = iree_hal_buffer_map_read(buffer, 0, r->data, bytes);
  if (!iree_status_is_ok(s)) {
    iree_status_free(s);  /* not host-visible: a transfer through the device */
    s = iree_hal_device_transfer_d2h(f->module->device, buffer, 0, r->data, bytes,
                                     IREE_HAL_TRANSFER_BUFFER_FLAG_DEFAULT, iree_infinite_timeout());
  }
  if (!iree_status_is_ok(s)) return fail_iree(IRGRAD_ERROR_RUNTIME, s, "%s result %zu: reading it", f->name, k);
  return IRGRAD_OK;
}

/* Runs `f` on device buffer views; `outputs` receives f->n_out new references. */
static irgrad_status invoke(irgrad_function* f, iree_hal_buffer_view_t** inputs, iree_hal_buffer_view_t** outputs) {
  iree_status_t s = iree_ok_status();
  if (!f->has_call) {
    s = iree_runtime_call_initialize(f->module->session, f->vm, &f->call);
    if (!iree_status_is_ok(s)) return fail_iree(IRGRAD_ERROR_RUNTIME, s, "%s: preparing the call", f->name);
    f->has_call = true;
  }
  iree_runtime_call_reset(&f->call);
  for (size_t i = 0; i < f->n_in && iree_status_is_ok(s); ++i) {
    s = iree_runtime_call_inputs_push_back_buffer_view(&f->call, inputs[i]);
  }
  if (iree_status_is_ok(s)) s = iree_runtime_call_invoke(&f->call, 0);
  if (!iree_status_is_ok(s)) {
    iree_runtime_call_reset(&f->call);
    return fail_iree(IRGRAD_ERROR_RUNTIME, s, "%s failed", f->name);
  }
  size_t got = 0;
  for (; got < f->n_out && iree_status_is_ok(s); ++got) {
    s = iree_runtime_call_outputs_pop_front_buffer_view(&f->call, &outputs[got]);
    if (!iree_status_is_ok(s)) break;
  }
  iree_runtime_call_reset(&f->call);
  if (!iree_status_is_ok(s)) {
    for (size_t k = 0; k < got; ++k) iree_hal_buffer_view_release(outputs[k]);
    return fail_iree(IRGRAD_ERROR_RUNTIME, s, "%s: reading its results", f->name);
  }
  return IRGRAD_OK;
}

static void release_views(iree_hal_buffer_view_t** views, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (views[i]) iree_hal_buffer_view_release(views[i]);
    views[i] = NULL;
  }
}

irgrad_status irgrad_call(irgrad_function* f, const irgrad_array* args, size_t n_args, irgrad_array* results,
                          size_t n_results) {
  if (!f) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_call: function is NULL");
  if (n_args != f->n_in) {
    return fail(IRGRAD_ERROR_COUNT, "%s expects %zu arguments, got %zu", f->name, f->n_in, n_args);
  }
  if (n_results != f->n_out) {
    return fail(IRGRAD_ERROR_COUNT, "%s returns %zu results, room given for %zu", f->name, f->n_out, n_results);
  }
  if ((n_args && !args) || (n_results && !results)) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_call: arrays are NULL");
  for (size_t k = 0; k < n_results; ++k) {
    irgrad_status status = check_result(f, k, &results[k]);
    if (status != IRGRAD_OK) return status;
  }
  iree_hal_buffer_view_t* stack[32];
  iree_hal_buffer_view_t** views = f->n_in + f->n_out <= 32 ? stack : calloc(f->n_in + f->n_out, sizeof(void*));
  if (!views) return fail(IRGRAD_ERROR_MEMORY, "out of memory");
  memset(views, 0, (f->n_in + f->n_out) * sizeof(void*));
  irgrad_status status = IRGRAD_OK;
  for (size_t i = 0; i < n_args && status == IRGRAD_OK; ++i) status = upload(f, i, &args[i], &views[i]);
  if (status == IRGRAD_OK) status = invoke(f, views, views + f->n_in);
  release_views(views, status == IRGRAD_OK ? f->n_in : n_args);
  if (status == IRGRAD_OK) {
    for (size_t k = 0; k < n_results && status == IRGRAD_OK; ++k) {
      status = download(f, k, views[f->n_in + k], &results[k]);
    }
    release_views(views + f->n_in, f->n_out);
  }
  if (views != stack) free(views);
  return status;
}

/* ------------------------------------------------------------------------------------------
 * Training.
 * ---------------------------------------------------------------------------------------- */

struct irgrad_trainer {
  irgrad_module* module;
  irgrad_function* step;
  irgrad_function* init;
  train_layout* layout;
  size_t n_args;    /* F's arguments */
  size_t n_results; /* F's results */
  size_t n_data;
  size_t* data;     /* argument indices of the data */
  iree_hal_buffer_view_t** params;
  iree_hal_buffer_view_t** state;
};

void irgrad_trainer_free(irgrad_trainer* t) {
  if (!t) return;
  if (t->params) release_views(t->params, t->layout->n_params);
  if (t->state) release_views(t->state, t->layout->n_state);
  free(t->params);
  free(t->state);
  free(t->data);
  free(t);
}

irgrad_status irgrad_trainer_create(irgrad_module* m, const char* step, const irgrad_array* args, size_t n_args,
                                    irgrad_trainer** out) {
  if (!m || !out) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_trainer_create: a NULL argument");
  *out = NULL;
  irgrad_function* f = NULL;
  size_t steps = 0;
  char names[1024] = "";
  for (size_t i = 0; i < m->n_functions; ++i) {
    if (!m->functions[i].train) continue;
    size_t n = strlen(names);
    snprintf(names + n, sizeof(names) - n, "%s%s", steps++ ? ", " : "", m->functions[i].name);
    if (!step ? steps == 1 : strcmp(step, m->functions[i].name) == 0) f = &m->functions[i];
  }
  if (!step && steps != 1) {
    return fail(IRGRAD_ERROR_NOT_FOUND, "the module has %zu training steps; name one (%s)", steps,
                steps ? names : "none: compile with --train");
  }
  if (!f) {
    return fail(IRGRAD_ERROR_NOT_FOUND, "'%s' is not a training step of this module (%s)", step,
                steps ? names : "none: compile with --train");
  }
  /* @F_train_step -> @F_train_init */
  char init_name[512];
  size_t n = strlen(f->name);
  const char* suffix = "_train_step";
  if (n < strlen(suffix) || n - strlen(suffix) + sizeof("_train_init") > sizeof(init_name)) {
    return fail(IRGRAD_ERROR_ARTIFACT, "%s: a training step not named F_train_step", f->name);
  }
  snprintf(init_name, sizeof(init_name), "%.*s_train_init", (int)(n - strlen(suffix)), f->name);
  irgrad_function* init = NULL;
  if (irgrad_module_function(m, init_name, &init) != IRGRAD_OK) {
    return fail(IRGRAD_ERROR_ARTIFACT, "%s: the artifact has no %s to start it with", f->name, init_name);
  }
  train_layout* layout = f->train;
  irgrad_trainer* t = calloc(1, sizeof(*t));
  if (!t) return fail(IRGRAD_ERROR_MEMORY, "out of memory");
  t->module = m;
  t->step = f;
  t->init = init;
  t->layout = layout;
  t->n_args = f->n_in - layout->n_state;
  t->n_results = f->n_out - layout->n_params - layout->n_state;
  t->n_data = t->n_args - layout->n_params;
  t->data = calloc(t->n_data + 1, sizeof(size_t));
  t->params = calloc(layout->n_params + 1, sizeof(void*));
  t->state = calloc(layout->n_state + 1, sizeof(void*));
  if (!t->data || !t->params || !t->state) {
    irgrad_trainer_free(t);
    return fail(IRGRAD_ERROR_MEMORY, "out of memory");
  }
  for (size_t i = 0, d = 0; i < t->n_args; ++i) {
    bool param = false;
    for (size_t p = 0; p < layout->n_params; ++p) param = param || layout->params[p] == i;
    if (!param && d < t->n_data) t->data[d++] = i;
  }
  if (init->n_in != t->n_args || init->n_out != layout->n_state) {
    irgrad_trainer_free(t);
    return fail(IRGRAD_ERROR_ARTIFACT, "%s does not match %s's layout", init->name, f->name);
  }
  /* The state: @F_train_init(args...). */
  irgrad_status status = IRGRAD_OK;
  if (n_args != t->n_args) {
    status = fail(IRGRAD_ERROR_COUNT, "%s expects %zu arguments (F's: parameters and data), got %zu", init->name,
                  t->n_args, n_args);
  } else if (n_args && !args) {
    status = fail(IRGRAD_ERROR_ARGUMENT, "irgrad_trainer_create: args is NULL");
  }
  iree_hal_buffer_view_t* views[256] = {0};
  if (status == IRGRAD_OK && t->n_args > 256) status = fail(IRGRAD_ERROR_COUNT, "more than 256 arguments");
  for (size_t i = 0; i < n_args && status == IRGRAD_OK; ++i) status = upload(init, i, &args[i], &views[i]);
  if (status == IRGRAD_OK) status = invoke(init, views, t->state);
  if (status == IRGRAD_OK) {
    for (size_t p = 0; p < layout->n_params; ++p) {
      t->params[p] = views[layout->params[p]];
      iree_hal_buffer_view_retain(t->params[p]);
    }
  }
  release_views(views, t->n_args <= 256 ? t->n_args : 0);
  if (status != IRGRAD_OK) {
    irgrad_trainer_free(t);
    return status;
  }
  *out = t;
  return IRGRAD_OK;
}

size_t irgrad_trainer_data_count(const irgrad_trainer* t) { return t ? t->n_data : 0; }
size_t irgrad_trainer_param_count(const irgrad_trainer* t) { return t ? t->layout->n_params : 0; }
size_t irgrad_trainer_state_count(const irgrad_trainer* t) { return t ? t->layout->n_state : 0; }
size_t irgrad_trainer_result_count(const irgrad_trainer* t) { return t ? t->n_results : 0; }
const char* irgrad_trainer_param_name(const irgrad_trainer* t, size_t i) {
  return t && i < t->layout->n_params ? t->layout->param_names[i] : NULL;
}
const char* irgrad_trainer_state_name(const irgrad_trainer* t, size_t i) {
  return t && i < t->layout->n_state ? t->layout->state_names[i] : NULL;
}

irgrad_status irgrad_trainer_step(irgrad_trainer* t, const irgrad_array* data, size_t n_data, irgrad_array* results,
                                  size_t n_results) {
  if (!t) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_trainer_step: trainer is NULL");
  irgrad_function* f = t->step;
  if (n_data != t->n_data) {
    return fail(IRGRAD_ERROR_COUNT, "%s: a step takes %zu data arrays, got %zu", f->name, t->n_data, n_data);
  }
  if (n_results != t->n_results) {
    return fail(IRGRAD_ERROR_COUNT, "%s: a step returns %zu results, room given for %zu", f->name, t->n_results,
                n_results);
  }
  if ((n_data && !data) || (n_results && !results)) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_trainer_step: NULL");
  for (size_t k = 0; k < n_results; ++k) {
    irgrad_status status = check_result(f, k, &results[k]);
    if (status != IRGRAD_OK) return status;
  }
  size_t total = f->n_in + f->n_out;
  iree_hal_buffer_view_t* stack[64];
  iree_hal_buffer_view_t** views = total <= 64 ? stack : calloc(total, sizeof(void*));
  if (!views) return fail(IRGRAD_ERROR_MEMORY, "out of memory");
  memset(views, 0, total * sizeof(void*));
  iree_hal_buffer_view_t** inputs = views;
  iree_hal_buffer_view_t** outputs = views + f->n_in;
  irgrad_status status = IRGRAD_OK;
  for (size_t d = 0; d < n_data && status == IRGRAD_OK; ++d) {
    status = upload(f, t->data[d], &data[d], &inputs[t->data[d]]);
  }
  if (status == IRGRAD_OK) {
    for (size_t p = 0; p < t->layout->n_params; ++p) inputs[t->layout->params[p]] = t->params[p];
    for (size_t s = 0; s < t->layout->n_state; ++s) inputs[t->n_args + s] = t->state[s];
    status = invoke(f, inputs, outputs);
    for (size_t p = 0; p < t->layout->n_params; ++p) inputs[t->layout->params[p]] = NULL;
    for (size_t s = 0; s < t->layout->n_state; ++s) inputs[t->n_args + s] = NULL;
  }
  release_views(inputs, f->n_in);
  if (status == IRGRAD_OK) {
    /* The step ran: its parameters and state are the trainer's now, whatever reading the
     * results gives. */
    release_views(t->params, t->layout->n_params);
    release_views(t->state, t->layout->n_state);
    memcpy(t->params, outputs + t->n_results, t->layout->n_params * sizeof(void*));
    memcpy(t->state, outputs + t->n_results + t->layout->n_params, t->layout->n_state * sizeof(void*));
    for (size_t k = 0; k < n_results && status == IRGRAD_OK; ++k) status = download(f, k, outputs[k], &results[k]);
    release_views(outputs, t->n_results);
  }
  if (views != stack) free(views);
  return status;
}

static irgrad_status read_views(irgrad_trainer* t, iree_hal_buffer_view_t** views, size_t first, size_t count,
                                irgrad_array* out, size_t n, const char* what) {
  if (!t || (n && !out)) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_trainer_%s: a NULL argument", what);
  if (n != count) return fail(IRGRAD_ERROR_COUNT, "%s: %zu %s arrays, room given for %zu", t->step->name, count, what, n);
  for (size_t i = 0; i < n; ++i) {
    irgrad_status status = check_result(t->step, first + i, &out[i]);
    if (status == IRGRAD_OK) status = download(t->step, first + i, views[i], &out[i]);
    if (status != IRGRAD_OK) return status;
  }
  return IRGRAD_OK;
}

irgrad_status irgrad_trainer_params(irgrad_trainer* t, irgrad_array* out, size_t n) {
  return read_views(t, t ? t->params : NULL, t ? t->n_results : 0, t ? t->layout->n_params : 0, out, n, "params");
}

irgrad_status irgrad_trainer_state(irgrad_trainer* t, irgrad_array* out, size_t n) {
  return read_views(t, t ? t->state : NULL, t ? t->n_results + t->layout->n_params : 0, t ? t->layout->n_state : 0,
                    out, n, "state");
}

/* ------------------------------------------------------------------------------------------
 * Checkpoints: "IRGRADC1", the step's name and layout, then each parameter and state array
 * (dtype, rank, shape, bytes), then a 64-bit FNV-1a of everything before it. Little-endian.
 * ---------------------------------------------------------------------------------------- */

static const char k_magic[8] = {'I', 'R', 'G', 'R', 'A', 'D', 'C', '1'};

typedef struct {
  unsigned char* data;
  size_t size, capacity;
  bool failed;
} bytes_out;

static void put(bytes_out* b, const void* data, size_t n) {
  if (b->failed) return;
  if (b->size + n > b->capacity) {
    size_t capacity = b->capacity ? b->capacity : 4096;
    while (capacity < b->size + n) capacity *= 2;
    unsigned char* grown = realloc(b->data, capacity);
    if (!grown) {
      b->failed = true;
      return;
    }
    b->data = grown;
    b->capacity = capacity;
  }
  memcpy(b->data + b->size, data, n);
  b->size += n;
}

static void put_u64(bytes_out* b, uint64_t v) { put(b, &v, sizeof(v)); }

static void put_text(bytes_out* b, const char* s) {
  put_u64(b, strlen(s));
  put(b, s, strlen(s));
}

static uint64_t fnv1a(const unsigned char* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= data[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* The types of what a checkpoint holds: the parameters (at the step's inputs), then the state. */
static const irgrad_tensor_info* saved_type(const irgrad_trainer* t, size_t i) {
  return i < t->layout->n_params ? &t->step->in[t->layout->params[i]] : &t->step->in[t->n_args + i - t->layout->n_params];
}

irgrad_status irgrad_trainer_save(irgrad_trainer* t, const char* path) {
  if (!t || !path) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_trainer_save: a NULL argument");
  bytes_out b = {0};
  put(&b, k_magic, sizeof(k_magic));
  put_text(&b, t->step->name);
  put_text(&b, t->layout->layout);
  size_t count = t->layout->n_params + t->layout->n_state;
  put_u64(&b, count);
  irgrad_status status = IRGRAD_OK;
  for (size_t i = 0; i < count && status == IRGRAD_OK; ++i) {
    iree_hal_buffer_view_t* view = i < t->layout->n_params ? t->params[i] : t->state[i - t->layout->n_params];
    size_t rank = iree_hal_buffer_view_shape_rank(view);
    const iree_hal_dim_t* dims = iree_hal_buffer_view_shape_dims(view);
    size_t bytes = (size_t)iree_hal_buffer_view_byte_length(view);
    put_u64(&b, (uint64_t)saved_type(t, i)->dtype);
    put_u64(&b, rank);
    for (size_t d = 0; d < rank; ++d) put_u64(&b, (uint64_t)dims[d]);
    put_u64(&b, bytes);
    unsigned char* room = malloc(bytes ? bytes : 1);
    if (!room) {
      status = fail(IRGRAD_ERROR_MEMORY, "out of memory");
      break;
    }
    irgrad_array a = {room, bytes, saved_type(t, i)->dtype, 0, {0}};
    status = download(t->step, 0, view, &a);
    put(&b, room, bytes);
    free(room);
  }
  if (b.failed && status == IRGRAD_OK) status = fail(IRGRAD_ERROR_MEMORY, "out of memory");
  if (status == IRGRAD_OK) put_u64(&b, fnv1a(b.data, b.size));
  if (b.failed && status == IRGRAD_OK) status = fail(IRGRAD_ERROR_MEMORY, "out of memory");
  if (status != IRGRAD_OK) {
    free(b.data);
    return status;
  }
  /* Atomically: a temporary file in the same folder, flushed to disk, renamed over the old
   * one, and the folder flushed. */
  size_t n = strlen(path);
  char* tmp = malloc(n + 16);
  char* folder = malloc(n + 2);
  if (!tmp || !folder) {
    free(tmp);
    free(folder);
    free(b.data);
    return fail(IRGRAD_ERROR_MEMORY, "out of memory");
  }
  snprintf(tmp, n + 16, "%s.tmpXXXXXX", path);
  memcpy(folder, path, n + 1);
  char* slash = strrchr(folder, '/');
  if (slash) {
    slash[slash == folder ? 1 : 0] = 0;
  } else {
    strcpy(folder, ".");
  }
  int fd = mkstemp(tmp);
  if (fd >= 0) fchmod(fd, 0644);
  if (fd < 0) {
    status = fail(IRGRAD_ERROR_IO, "%s: cannot write a checkpoint there: %s", path, strerror(errno));
  } else {
    size_t written = 0;
    while (written < b.size) {
      ssize_t w = write(fd, b.data + written, b.size - written);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) break;
      written += (size_t)w;
    }
    bool ok = written == b.size && fsync(fd) == 0;
    int error = errno;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) != 0) {
      ok = false;
      error = errno;
    }
    if (!ok) {
      unlink(tmp);
      status = fail(IRGRAD_ERROR_IO, "%s: cannot write the checkpoint: %s", path, strerror(error));
    } else {
      int dir = open(folder, O_RDONLY);
      if (dir >= 0) {
        fsync(dir);
        close(dir);
      }
    }
  }
  free(tmp);
  free(folder);
  free(b.data);
  return status;
}

typedef struct {
  const unsigned char* data;
  size_t size, at;
} bytes_in;

static bool get(bytes_in* b, void* out, size_t n) {
  if (b->size - b->at < n) return false;
  memcpy(out, b->data + b->at, n);
  b->at += n;
  return true;
}

static bool get_u64(bytes_in* b, uint64_t* v) { return get(b, v, sizeof(*v)); }

static bool get_text_equal(bytes_in* b, const char* want, char* got, size_t capacity) {
  uint64_t n;
  if (!get_u64(b, &n) || b->size - b->at < n) return false;
  snprintf(got, capacity, "%.*s", (int)(n < capacity ? n : capacity - 1), (const char*)b->data + b->at);
  bool equal = n == strlen(want) && memcmp(b->data + b->at, want, n) == 0;
  b->at += n;
  return equal;
}

irgrad_status irgrad_trainer_restore(irgrad_trainer* t, const char* path) {
  if (!t || !path) return fail(IRGRAD_ERROR_ARGUMENT, "irgrad_trainer_restore: a NULL argument");
  FILE* file = fopen(path, "rb");
  if (!file) return fail(IRGRAD_ERROR_IO, "%s: %s", path, strerror(errno));
  unsigned char* data = NULL;
  long size = -1;
  if (fseek(file, 0, SEEK_END) == 0) size = ftell(file);
  if (size >= 0 && fseek(file, 0, SEEK_SET) == 0) data = malloc((size_t)size + 1);
  size_t got = data ? fread(data, 1, (size_t)size, file) : 0;
  fclose(file);
  if (!data || got != (size_t)size) {
    free(data);
    return fail(IRGRAD_ERROR_IO, "%s: cannot read it", path);
  }
  const char* where = t->step->name;
  irgrad_status status = IRGRAD_OK;
  bytes_in b = {data, (size_t)size, 0};
  char magic[8], text[256];
  uint64_t sum = 0, count = 0;
  size_t total = t->layout->n_params + t->layout->n_state;
  iree_hal_buffer_view_t** views = calloc(total + 1, sizeof(void*));
  if (!views) {
    free(data);
    return fail(IRGRAD_ERROR_MEMORY, "out of memory");
  }
  if (b.size < sizeof(magic) + 8 || !get(&b, magic, sizeof(magic)) || memcmp(magic, k_magic, sizeof(magic)) != 0) {
    status = fail(IRGRAD_ERROR_CHECKPOINT, "%s: not a checkpoint of %s", path, where);
    goto done;
  }
  memcpy(&sum, data + b.size - 8, 8);
  if (sum != fnv1a(data, b.size - 8)) {
    status = fail(IRGRAD_ERROR_CHECKPOINT, "%s: not a checkpoint of %s: damaged (checksum mismatch)", path, where);
    goto done;
  }
  b.size -= 8;
  if (!get_text_equal(&b, t->step->name, text, sizeof(text))) {
    status = fail(IRGRAD_ERROR_CHECKPOINT, "%s: not a checkpoint of %s: it was saved from %s", path, where, text);
    goto done;
  }
  if (!get_text_equal(&b, t->layout->layout, text, sizeof(text))) {
    status = fail(IRGRAD_ERROR_CHECKPOINT, "%s: not a checkpoint of %s: it was saved with another layout (%s)", path,
                  where, text);
    goto done;
  }
  if (!get_u64(&b, &count) || count != total) {
    status = fail(IRGRAD_ERROR_CHECKPOINT, "%s: not a checkpoint of %s: %llu arrays, expected %zu", path, where,
                  (unsigned long long)count, total);
    goto done;
  }
  /* Every array checked before any reaches the device. */
  size_t* offsets = calloc(total + 1, sizeof(size_t));
  irgrad_array* arrays = calloc(total + 1, sizeof(irgrad_array));
  if (!offsets || !arrays) {
    free(offsets);
    free(arrays);
    status = fail(IRGRAD_ERROR_MEMORY, "out of memory");
    goto done;
  }
  for (size_t i = 0; i < total && status == IRGRAD_OK; ++i) {
    uint64_t dtype = 0, rank = 0, bytes = 0;
    irgrad_array* a = &arrays[i];
    bool ok = get_u64(&b, &dtype) && get_u64(&b, &rank) && rank <= IRGRAD_MAX_RANK;
    for (uint64_t d = 0; ok && d < rank; ++d) {
      uint64_t dim = 0;
      ok = get_u64(&b, &dim);
      a->shape[d] = (int64_t)dim;
    }
    ok = ok && get_u64(&b, &bytes) && b.size - b.at >= bytes;
    if (!ok) {
      status = fail(IRGRAD_ERROR_CHECKPOINT, "%s: not a checkpoint of %s: truncated", path, where);
      break;
    }
    a->dtype = (irgrad_dtype)dtype;
    a->rank = (int32_t)rank;
    a->data = (void*)(data + b.at);
    a->byte_size = (size_t)bytes;
    b.at += (size_t)bytes;
    const irgrad_tensor_info* want = saved_type(t, i);
    size_t index = i < t->layout->n_params ? t->layout->params[i] : t->n_args + i - t->layout->n_params;
    size_t need = 0;
    status = check_arg(t->step, index, want, a, &need);
    if (status == IRGRAD_OK && need != a->byte_size) {
      status = fail(IRGRAD_ERROR_CHECKPOINT, "%s: %s: %zu bytes where %zu are expected", path, want->name,
                    a->byte_size, need);
    }
    if (status != IRGRAD_OK) {
      status = fail(IRGRAD_ERROR_CHECKPOINT, "%s: not a checkpoint of %s: %s", path, where, irgrad_last_error());
    }
  }
  for (size_t i = 0; i < total && status == IRGRAD_OK; ++i) {
    size_t index = i < t->layout->n_params ? t->layout->params[i] : t->n_args + i - t->layout->n_params;
    status = upload(t->step, index, &arrays[i], &views[i]);
  }
  free(offsets);
  free(arrays);
  if (status == IRGRAD_OK) {
    release_views(t->params, t->layout->n_params);
    release_views(t->state, t->layout->n_state);
    memcpy(t->params, views, t->layout->n_params * sizeof(void*));
    memcpy(t->state, views + t->layout->n_params, t->layout->n_state * sizeof(void*));
    memset(views, 0, total * sizeof(void*));
  }
done:
  release_views(views, total);
  free(views);
  free(data);
  return status;
}
