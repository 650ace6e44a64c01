/* A CUPTI injection library: the host's CUDA-graph calls and the device's graph executions of one process, to see
 * where a cold first eval's host time goes (docs/generation.md, "CUDA: a first eval cold and warm").
 *
 * Built and loaded on the device by docs/tools/device/first_eval_trace.sh:
 *   gcc -shared -fPIC -O2 -o cold_trace.so cold_trace.c -I$CUDA/include -I$CUPTI/include -L$CUPTI/lib64 -lcupti
 *   CUDA_INJECTION64_PATH=$PWD/cold_trace.so COLD_TRACE_OUT=trace.txt python3 ...
 * Writes one line per event, times in ns of CLOCK_MONOTONIC (Python's time.perf_counter() clock):
 *   A|R <E|X> <cbid> <name> <t>   a driver (A) or runtime (R) call entered or left (graph instantiate, update and
 *                                 launch, module loads, synchronizations, host functions, allocations)
 *   N <driver> <runtime>          kernel nodes added to graphs since the last launch, as each API counts them
 *   C <correlation> <name>        the launch call that follows (its correlation id matches a G line's)
 *   G <correlation> <start> <end> a graph's execution on the device
 */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static FILE *out;
static int64_t offset_ns; /* CLOCK_MONOTONIC - cuptiGetTimestamp */
static long nodes_driver, nodes_runtime;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int interesting(const char *name) {
  static const char *keys[] = {"GraphInstantiate", "GraphExecUpdate", "GraphLaunch", "ModuleLoad", "LibraryLoad",
                               "Synchronize", "LaunchHostFunc", "StreamWaitEvent", "MemAlloc", "MemFree", NULL};
  for (int i = 0; keys[i]; i++)
    if (strstr(name, keys[i])) return 1;
  return 0;
}

static void CUPTIAPI on_call(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId id, const void *p) {
  const CUpti_CallbackData *d = (const CUpti_CallbackData *)p;
  int driver = dom == CUPTI_CB_DOMAIN_DRIVER_API;
  if ((!driver && dom != CUPTI_CB_DOMAIN_RUNTIME_API) || !d->functionName) return;
  if (strstr(d->functionName, "GraphAddKernelNode")) {
    if (d->callbackSite == CUPTI_API_ENTER) *(driver ? &nodes_driver : &nodes_runtime) += 1;
    return;
  }
  if (!interesting(d->functionName)) return;
  int64_t t = now_ns();
  if (strstr(d->functionName, "GraphLaunch") && d->callbackSite == CUPTI_API_ENTER) {
    fprintf(out, "N %ld %ld\nC %u %s\n", nodes_driver, nodes_runtime, d->correlationId, d->functionName);
    nodes_driver = nodes_runtime = 0;
  }
  fprintf(out, "%c %c %u %s %lld\n", driver ? 'A' : 'R', d->callbackSite == CUPTI_API_ENTER ? 'E' : 'X', id,
          d->functionName, (long long)t);
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  *size = 8 << 20;
  *buffer = (uint8_t *)aligned_alloc(8, *size);
  *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size, size_t valid) {
  CUpti_Activity *rec = NULL;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind == CUPTI_ACTIVITY_KIND_GRAPH_TRACE) {
      CUpti_ActivityGraphTrace2 *g = (CUpti_ActivityGraphTrace2 *)rec;
      fprintf(out, "G %u %lld %lld\n", g->correlationId, (long long)(g->start + offset_ns),
              (long long)(g->end + offset_ns));
    }
  }
  free(buffer);
}

static void at_exit(void) {
  cuptiActivityFlushAll(1);
  fflush(out);
}

int InitializeInjection(void) {
  const char *path = getenv("COLD_TRACE_OUT");
  out = fopen(path ? path : "cold_trace.txt", "w");
  if (!out) return 0;
  uint64_t cupti_ns;
  cuptiGetTimestamp(&cupti_ns);
  offset_ns = now_ns() - (int64_t)cupti_ns;
  CUpti_SubscriberHandle sub;
  cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_call, NULL);
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API);
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
  cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
  atexit(at_exit);
  return 1;
}
