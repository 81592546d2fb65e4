/* tests/test_c_embed.py: every way a call can go wrong gives a status and a message, never a
 * crash. Prints one line per case: "<case> <status name> <message>".
 *
 *   errors MLP.vmfb OTHER.vmfb NOT_AN_ARTIFACT TRUNCATED DAMAGED
 *
 * MLP.vmfb: examples/mlp.py's loss with --grad --with-value (mlp.h is its header); OTHER: any
 * other artifact. */
#include <stdio.h>
#include <string.h>

#include "mlp.h"

static void report(const char* name, irgrad_status status) {
  printf("%s %s %s\n", name, irgrad_status_name(status), status == IRGRAD_OK ? "" : irgrad_last_error());
}

int main(int argc, char** argv) {
  if (argc != 6) return 2;
  irgrad_module* m = NULL;
  report("missing_file", irgrad_module_open_file("/nonexistent/model.vmfb", NULL, &m));
  report("not_an_artifact", irgrad_module_open_file(argv[3], NULL, &m));
  report("truncated", irgrad_module_open_file(argv[4], NULL, &m));
  report("damaged", irgrad_module_open_file(argv[5], NULL, &m));
  report("bad_driver", irgrad_module_open_file(argv[1], "cuda", &m));
  report("other_artifact", mlp_open(argv[2], NULL, &m));
  report("null_out", irgrad_module_open_file(argv[1], NULL, NULL));
  if (mlp_open(argv[1], "local-sync", &m) != IRGRAD_OK) {
    report("open", IRGRAD_ERROR_ARTIFACT);
    return 1;
  }
  irgrad_function* f = NULL;
  report("no_function", irgrad_module_function(m, "loss_grads", &f));
  irgrad_module_function(m, "loss_grad", &f);

  static float x[8][4], y[8][1], w1[4][16], b1[16], w2[16][1], b2[1];
  static float loss, d_x[8][4], d_y[8][1], d_w1[4][16], d_b1[16], d_w2[16][1], d_b2[1];
  irgrad_array args[6] = {
      {x, sizeof(x), IRGRAD_FLOAT32, 2, {8, 4}},   {y, sizeof(y), IRGRAD_FLOAT32, 2, {8, 1}},
      {w1, sizeof(w1), IRGRAD_FLOAT32, 2, {4, 16}}, {b1, sizeof(b1), IRGRAD_FLOAT32, 1, {16}},
      {w2, sizeof(w2), IRGRAD_FLOAT32, 2, {16, 1}}, {b2, sizeof(b2), IRGRAD_FLOAT32, 1, {1}},
  };
  irgrad_array results[7] = {
      {&loss, sizeof(loss), IRGRAD_FLOAT32, 0, {0}},  {d_x, sizeof(d_x), IRGRAD_FLOAT32, 2, {8, 4}},
      {d_y, sizeof(d_y), IRGRAD_FLOAT32, 2, {8, 1}},  {d_w1, sizeof(d_w1), IRGRAD_FLOAT32, 2, {4, 16}},
      {d_b1, sizeof(d_b1), IRGRAD_FLOAT32, 1, {16}}, {d_w2, sizeof(d_w2), IRGRAD_FLOAT32, 2, {16, 1}},
      {d_b2, sizeof(d_b2), IRGRAD_FLOAT32, 1, {1}},
  };
  report("ok", irgrad_call(f, args, 6, results, 7));
  report("too_few_args", irgrad_call(f, args, 5, results, 7));
  report("too_few_results", irgrad_call(f, args, 6, results, 6));
  args[2].shape[1] = 15;
  report("wrong_shape", irgrad_call(f, args, 6, results, 7));
  args[2].shape[1] = 16;
  args[2].rank = 1;
  report("wrong_rank", irgrad_call(f, args, 6, results, 7));
  args[2].rank = 2;
  args[3].dtype = IRGRAD_FLOAT64;
  report("wrong_dtype", irgrad_call(f, args, 6, results, 7));
  args[3].dtype = IRGRAD_FLOAT32;
  args[0].byte_size = 12;
  report("short_buffer", irgrad_call(f, args, 6, results, 7));
  args[0].byte_size = sizeof(x);
  args[0].data = NULL;
  report("null_data", irgrad_call(f, args, 6, results, 7));
  args[0].data = x;
  results[3].byte_size = 8;
  report("small_result", irgrad_call(f, args, 6, results, 7));
  results[3].byte_size = sizeof(d_w1);
  results[0].dtype = IRGRAD_INT32;
  report("result_dtype", irgrad_call(f, args, 6, results, 7));
  results[0].dtype = IRGRAD_FLOAT32;
  report("no_trainer", irgrad_trainer_create(m, NULL, args, 6, NULL));
  irgrad_trainer* t = NULL;
  report("no_training_step", irgrad_trainer_create(m, NULL, args, 6, &t));
  report("ok_again", mlp_loss_grad(m, x, y, w1, b1, w2, b2, &loss, d_x, d_y, d_w1, d_b1, d_w2, d_b2));
  irgrad_module_close(m);
  return 0;
}
