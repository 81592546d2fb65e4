/* A gradient from C through a typed header: examples/mlp.py's loss and its gradient.
 *
 *   irgrad compile examples/mlp.py:loss --grad --with-value -o mlp.vmfb
 *   irgrad header mlp.vmfb -o mlp.h --embed
 *   cc examples/c/grad.c -I. $(cat BUILD/irgrad.flags) -o grad
 *   ./grad [ARTIFACT|-] INPUTS [OUTPUTS] [--driver D]
 *
 * ARTIFACT: the .vmfb, or - for the one embedded in mlp.h. INPUTS: x, y, w1, b1, w2, b2, raw
 * float32, one after another. OUTPUTS: the loss and the six gradients, raw, written there.
 */
#include <stdio.h>
#include <string.h>

#include "mlp.h"

static struct {
  float x[8][4], y[8][1], w1[4][16], b1[16], w2[16][1], b2[1];
} in;
static struct {
  float loss, d_x[8][4], d_y[8][1], d_w1[4][16], d_b1[16], d_w2[16][1], d_b2[1];
} out;

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: grad ARTIFACT|- INPUTS [OUTPUTS] [--driver D]\n");
    return 2;
  }
  const char* driver = argc >= 6 && strcmp(argv[4], "--driver") == 0 ? argv[5] : NULL;
  FILE* f = fopen(argv[2], "rb");
  if (!f || fread(&in, sizeof(in), 1, f) != 1) {
    fprintf(stderr, "grad: %s: expected %zu bytes of inputs\n", argv[2], sizeof(in));
    return 1;
  }
  fclose(f);

  irgrad_module* module = NULL;
  irgrad_status status;
#ifdef MLP_EMBEDDED
  if (strcmp(argv[1], "-") == 0) {
    status = mlp_open_embedded(driver, &module);
  } else
#endif
  {
    status = mlp_open(argv[1], driver, &module);
  }
  if (status != IRGRAD_OK) {
    fprintf(stderr, "grad: %s: %s\n", irgrad_status_name(status), irgrad_last_error());
    return 1;
  }
  status = mlp_loss_grad(module, in.x, in.y, in.w1, in.b1, in.w2, in.b2, &out.loss, out.d_x, out.d_y, out.d_w1,
                         out.d_b1, out.d_w2, out.d_b2);
  if (status != IRGRAD_OK) {
    fprintf(stderr, "grad: %s: %s\n", irgrad_status_name(status), irgrad_last_error());
    irgrad_module_close(module);
    return 1;
  }
  printf("loss %.9g on %s; d loss/d b2 %.9g\n", (double)out.loss, irgrad_module_driver(module), (double)out.d_b2[0]);
  if (argc >= 4 && strcmp(argv[3], "--driver") != 0) {
    FILE* o = fopen(argv[3], "wb");
    if (!o || fwrite(&out, sizeof(out), 1, o) != 1 || fclose(o) != 0) {
      fprintf(stderr, "grad: cannot write %s\n", argv[3]);
      return 1;
    }
  }
  irgrad_module_close(module);
  return 0;
}
